"""The command line's options: one parser per command (`rlax-trpo report`'s lives with
the command, `rlax_trpo.report.command`). A parser's error is one line (`UsageError`).
Nothing here imports JAX."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlax_trpo.errors import UsageError


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> None:  # one line, exit status 2
        raise UsageError(message)

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201
        if args is not None:
            self._refuse_repeats(list(args))
        return super().parse_known_args(args, namespace)

    def _refuse_repeats(self, args: list[str]) -> None:
        """An option of one value given twice (`--config a --config b`): argparse would keep
        the last without a word."""
        once = {
            option: action
            for action in self._actions
            if type(action).__name__ == "_StoreAction" and action.nargs in (None, "?")
            for option in action.option_strings
        }
        seen: dict[str, tuple[str, str]] = {}
        for i, token in enumerate(args):
            if token == "--":
                break
            option, sep, value = token.partition("=")
            action = once.get(option)
            if action is None:
                continue
            if not sep:
                value = args[i + 1] if i + 1 < len(args) else ""
            name = action.option_strings[-1]
            if action.dest in seen:
                first = seen[action.dest][1]
                raise UsageError(f"{name}: given twice ({first!r} and {value!r}); give it once")
            seen[action.dest] = (name, value)


def build_parser(prog: str = "rlax-trpo train") -> argparse.ArgumentParser:
    p = Parser(
        prog=prog,
        description="Train VPG/NPG/TRPO/PPO/GRPO agents: seeds x hyperparameter settings in one "
        "compiled call, sharded over devices, in resumable chunks.",
        epilog="Overrides use the YAML keys, anywhere on the line: num_envs=64 "
        "hp.learning_rate=1e-3 env=Acrobot-v1",
    )
    p.add_argument(
        "--config",
        help="a bundled config's name (`rlax-trpo configs`) or a YAML file; "
        "default: PPO on CartPole-v1",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module of yours first (it registers algorithms or environments); "
        "a name on the Python path or in this directory, or a .py path; repeatable",
    )
    p.add_argument("--no-compile-cache", action="store_true", help="no persistent compile cache")
    _population_options(p.add_argument_group("the population and its run folder"))
    _logging_options(p.add_argument_group("logging"))
    _multihost_options(p.add_argument_group("several processes (multi-host)"))
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return p


def _population_options(group: Any) -> None:
    add = group.add_argument

    def folder(text: str) -> Path:  # an empty path (an unset variable) is the working directory
        if text.strip():
            return Path(text)
        raise argparse.ArgumentTypeError("an empty path (it would be the current directory)")

    add("--seeds", type=int, help="number of seeds, vmapped (default 1)")
    add("--seed", type=int, help="base PRNG seed (default 0)")
    add("--sweep", action="append", default=[], metavar="hp.NAME=V1,V2", help="sweep (repeat)")
    add("--out", type=folder, help="run folder (default runs/<algo>_<env>_<time>)")
    add("--chunk-iterations", type=int, metavar="K", help="checkpoint every K iterations")
    add(
        "--single-call",
        action="store_true",
        help="each chunk (without --chunk-iterations, the whole run) as one compiled call: "
        "fastest, but a signal waits for the call and every budget compiles anew (benchmarks)",
    )
    add(
        "--resume",
        type=folder,
        metavar="DIR",
        help="continue the run in DIR (from its newest "
        "checkpoint, or its final phase, or from the start if it saved none)",
    )
    add(
        "--keep-checkpoints",
        type=int,
        default=2,
        metavar="K",
        help="keep the newest K checkpoints (default 2)",
    )
    add("--devices", type=int, metavar="N", help="devices to shard over (default: all that fit)")
    add(
        "--shard",
        choices=("population", "envs", "model"),
        default="population",
        help="what to split: the population, the environments, or a model's weights",
    )


def _logging_options(group: Any) -> None:
    add = group.add_argument
    add("--no-progress", action="store_true", help="hide the progress bar")
    quiet = "show the libraries' own messages (absl, orbax, XLA) here, not in <run>/run.log"
    add("--verbose", action="store_true", help=quiet)
    add("--tensorboard", action="store_true", help="write <run>/tensorboard (tensorboardX)")
    add("--wandb", action="store_true", help="log to Weights & Biases (WANDB_MODE is honoured)")
    add("--wandb-project", default="rlax_trpo", metavar="NAME", help="W&B project")
    add("--wandb-name", metavar="NAME", help="W&B run name (default: the run folder's name)")
    add(
        "--log-every",
        type=int,
        metavar="K",
        help="TensorBoard/W&B: write every K iterations "
        "(default: --chunk-iterations, else about a tenth of the run)",
    )


def _multihost_options(group: Any) -> None:
    add = group.add_argument
    add("--coordinator-address", metavar="HOST:PORT", help="multi-host: address of process 0")
    add("--num-processes", type=int, help="multi-host: number of processes")
    add("--process-id", type=int, help="multi-host: this process")
    add(
        "--peer-timeout",
        type=int,
        metavar="S",
        help="multi-host: seconds a silent peer is waited for before the run stops (default 60)",
    )
    wait = "multi-host: seconds to wait for every process to join and compile (default 600)"
    add("--startup-timeout", type=int, metavar="S", help=wait)


def build_eval_parser(prog: str = "rlax-trpo eval") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Evaluate a run: greedy and sampling returns.")
    add = p.add_argument
    add("--run", type=Path, required=True, metavar="DIR", help="run folder")
    add("--episodes", type=int, default=10, help="episodes per seed (default 10)")
    add("--seed", type=int, default=1234, help="evaluation PRNG seed")
    add("--gif", type=Path, nargs="?", const=Path("episode.gif"), help="render a greedy episode")
    add("--member", type=int, help="member to render (default: seed 0 of the best setting)")
    add("--max-steps", type=int, help="episode step limit (default: the env's)")
    add(
        "--export",
        type=Path,
        metavar="DIR",
        help="a pretrained model's run: write --member's policy (default 0) as a Hugging Face "
        "folder, LoRA merged",
    )
    add("--no-compile-cache", action="store_true", help="no persistent compile cache")
    return p


def build_configs_parser(prog: str = "rlax-trpo configs") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="List the bundled configurations, or show one whole.")
    add = p.add_argument
    add(
        "--show",
        metavar="NAME",
        help="print every field of a config (a bundled name, a YAML "
        "file, or 'default' for the default run) with its value and where it came from: "
        "the file, an override or the default",
    )
    add("--envs", action="store_true", help="list the valid environment names, by suite")
    add(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module of yours first (its algorithms and environments)",
    )
    add("overrides", nargs="*", metavar="key=value", help="overrides, with --show")
    return p


def build_tiny_lm_parser(prog: str = "rlax-trpo tiny-lm") -> argparse.ArgumentParser:
    from rlax_trpo.lm.word_problems import KINDS

    p = Parser(
        prog=prog,
        description="Write a small pretrained language model in the Hugging Face layout: a BPE "
        "tokenizer and a Qwen2-layout decoder trained here by supervised steps on word problems.",
    )
    add = p.add_argument
    add("--out", type=Path, required=True, metavar="DIR", help="the folder (new or empty)")
    add("--steps", type=int, default=1500, help="supervised steps (default 1500)")
    add("--seed", type=int, default=0, help="seed of the problems and the initialisation")
    add("--width", type=int, default=128, help="hidden size (default 128)")
    add("--layers", type=int, default=4, help="decoder layers (default 4)")
    add("--vocab-size", type=int, default=2048, help="BPE vocabulary at most (default 2048)")
    add("--kinds", nargs="+", choices=KINDS, metavar="KIND", help=f"problem kinds: {KINDS}")
    add("--no-compile-cache", action="store_true", help="no persistent compile cache")
    return p
