"""The command line: `rlax-trpo train | eval | configs | report` (`python train.py` too).

`rlax-trpo train` with no arguments trains PPO on CartPole-v1 (the embedded default, about
a minute on a 2-core CPU). Every seed runs inside one compiled, vmapped call
(`rlax_trpo.experiment.run`). The run folder gets `config.yaml`, `metrics.csv`,
`summary.json`, `learning_curve.png` and `checkpoint/`. `eval --run DIR` evaluates a finished
run (`rlax_trpo.load_policy`); `report PATH ...` gives rliable's statistics (`aggregate`).

Bad input prints one line naming the problem and exits with status 2, writing nothing.
Nothing here imports JAX at module level: `rlax_trpo.platform.setup_cpu` runs first.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rlax_trpo.errors import UsageError
from rlax_trpo.experiment import peers


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit status 2
        raise UsageError(message)


def build_parser(prog: str = "rlax-trpo train") -> argparse.ArgumentParser:
    p = _Parser(
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
    _population_options(p.add_argument_group("the population and its run folder"))
    _logging_options(p.add_argument_group("logging"))
    _multihost_options(p.add_argument_group("several processes (multi-host)"))
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return p


def _population_options(group: Any) -> None:
    add = group.add_argument
    add("--seeds", type=int, help="number of seeds, vmapped (default 1)")
    add("--seed", type=int, help="base PRNG seed (default 0)")
    add("--sweep", action="append", default=[], metavar="hp.NAME=V1,V2", help="sweep (repeat)")
    add("--out", type=Path, help="run folder (default runs/<algo>_<env>_<time>)")
    add("--chunk-iterations", type=int, metavar="K", help="checkpoint every K iterations")
    add(
        "--resume",
        type=Path,
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
    add("--shard", choices=("population", "envs"), default="population", help="what to split")


def _logging_options(group: Any) -> None:
    add = group.add_argument
    add("--no-progress", action="store_true", help="hide the progress bar")
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
        help="multi-host: seconds to wait for every "
        "process to join, and for a silent peer before the run stops (default 60)",
    )


def train_main(argv: list[str], prog: str = "rlax-trpo train") -> int:
    """`train [options] [key=value ...]`; returns the exit status (0, 1 diverged, 128+signal
    interrupted)."""
    from rlax_trpo.platform import setup_cpu

    args = build_parser(prog).parse_intermixed_args(argv)
    flags = {
        "--devices": args.devices,
        "--num-processes": args.num_processes,
        "--log-every": args.log_every,
        "--peer-timeout": args.peer_timeout,
    }
    for flag, value in flags.items():
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be a positive integer (got {value})")
    if args.seed is not None and not 0 <= args.seed < 2**63:
        raise UsageError(f"--seed: must be an integer from 0 to 2**63 - 1 (got {args.seed})")
    multi_host = peers.check_args(args)
    if multi_host and not peers.in_supervised_child():  # the runtime's aborts become one line
        return peers.supervise(argv, prog, args.process_id, args.resume or args.out)
    # Before JAX starts (gymnax starts it at import): one CPU device per core, or --devices.
    setup_cpu(None if multi_host else args.devices)
    if multi_host:
        peers.join(args)
    from rlax_trpo.experiment import driver

    config, sweep = _train_config(args)
    wandb = None
    if args.wandb:
        wandb = {"project": args.wandb_project, "name": args.wandb_name}
    result = driver.run(
        config,
        seeds=args.seeds,
        seed=args.seed,
        sweep=sweep,
        out=args.out,
        chunk_iterations=args.chunk_iterations,
        resume=args.resume,
        devices=args.devices,
        shard=args.shard,
        progress=not args.no_progress,
        tensorboard=args.tensorboard,
        wandb=wandb,
        log_every=args.log_every,
        keep_checkpoints=args.keep_checkpoints,
        hard_stop=True,
    )
    return _report(result, prog)


def _train_config(args: argparse.Namespace) -> tuple[Any, Any]:
    """The run's config (None to take the resumed run's) and sweep, from the command line."""
    from rlax_trpo.config.configuration import load_config
    from rlax_trpo.config.sweep import parse_sweeps
    from rlax_trpo.experiment.checkpoint import load_config as saved_config

    config = None
    if args.resume is not None and not (args.resume / "checkpoint").is_dir():
        raise UsageError(f"--resume: {str(args.resume)!r} is not a run folder")
    if args.resume is None or args.config is not None or args.overrides or args.imports:
        base = None  # with --resume alone, overrides are checked against the saved config
        if args.resume is not None and args.config is None:
            base = saved_config(args.resume / "checkpoint").to_dict()
        config = load_config(args.config, args.overrides, args.imports, base)
    if not args.sweep:
        return config, None
    base = config if config is not None else saved_config(args.resume / "checkpoint")
    return config, parse_sweeps(args.sweep, base)


def _report(result, prog: str = "rlax-trpo train") -> int:
    import shlex

    import jax

    from rlax_trpo.report.run_files import format_outcome

    # How to resume: the command the user ran (a checkout's script runs under python).
    command = f"python {prog}" if prog.endswith(".py") else prog
    out, err, code = format_outcome(result, f"{command} --resume {shlex.quote(str(result.out))}")
    if jax.process_index() == 0:  # in a multi-process run, process 0 speaks for all
        print(out, end="")
        print(err, end="", file=sys.stderr)
    return code


def build_eval_parser(prog: str = "rlax-trpo eval") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="Evaluate a run: greedy and sampling returns.")
    add = p.add_argument
    add("--run", type=Path, required=True, metavar="DIR", help="run folder")
    add("--episodes", type=int, default=10, help="episodes per seed (default 10)")
    add("--seed", type=int, default=1234, help="evaluation PRNG seed")
    add("--gif", type=Path, nargs="?", const=Path("episode.gif"), help="render a greedy episode")
    add("--member", type=int, help="member to render (default: seed 0 of the best setting)")
    add("--max-steps", type=int, help="episode step limit (default: the env's)")
    return p


def eval_main(argv: list[str], prog: str = "rlax-trpo eval") -> int:
    """`eval --run DIR [--episodes N] [--gif [PATH]]`; returns the exit status."""
    from rlax_trpo.platform import setup_cpu

    args = build_eval_parser(prog).parse_args(argv)
    setup_cpu(1)  # evaluation runs on one device
    from rlax_trpo.experiment.saved import eval_command

    return eval_command(args)


def build_configs_parser(prog: str = "rlax-trpo configs") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="List the bundled configurations, or show one whole.")
    add = p.add_argument
    add(
        "--show",
        metavar="NAME",
        help="print every field of a config (a bundled name, a YAML "
        "file, or 'default' for the default run) with its value and where it came from: "
        "the file, an override or the default",
    )
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


def configs_main(argv: list[str], prog: str = "rlax-trpo configs") -> int:
    """`configs`: the bundled configurations, one per line with algorithm and environment;
    `configs --show NAME [key=value ...]`: one configuration resolved, as YAML."""
    args = build_configs_parser(prog).parse_intermixed_args(argv)
    if args.show is None:
        if args.overrides or args.imports:
            raise UsageError("configs: overrides and --import need --show NAME")
        from rlax_trpo.config.defaults import bundled_config_table

        print(bundled_config_table(), end="")
        return 0
    from rlax_trpo.platform import setup_cpu

    setup_cpu(1)
    from rlax_trpo.config.configuration import describe_sources

    print(describe_sources(args.show, args.overrides, args.imports), end="")
    return 0


def report_main(argv: list[str], prog: str = "rlax-trpo report") -> int:
    """`report PATH [PATH ...] [options]`; the exit status (2: bad input, or no rliable)."""
    from rlax_trpo.report.command import build_report_parser, report_command

    args = build_report_parser(prog, _Parser).parse_intermixed_args(argv)
    return report_command(args, prog)


COMMANDS = {
    "train": "train a population of seeds x settings and write its run folder (the default)",
    "eval": "evaluate a finished run folder: greedy and sampling returns, a GIF",
    "configs": "list the bundled configurations; --show NAME prints one whole",
    "report": "statistics over finished runs (rliable): tables, intervals, figures",
}


def main_help(prog: str = "rlax-trpo") -> str:
    """`rlax-trpo --help`: the commands, one line each."""
    lines = [
        f"usage: {prog} [train] [options] [key=value ...]",
        f"       {prog} eval --run DIR [options]",
        f"       {prog} configs [--show NAME [key=value ...]]",
        f"       {prog} report PATH [PATH ...] [--out DIR] [options]",
        "",
        "Policy optimisation (VPG, NPG, TRPO, PPO, GRPO) compiled end to end in JAX.",
        "",
        "commands:",
        *(f"  {name:9s} {text}" for name, text in COMMANDS.items()),
        "",
        f"`{prog} COMMAND --help` shows a command's options. With no command, `train` runs",
        f"(`{prog}` alone trains PPO on CartPole-v1).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, prog: str = "rlax-trpo") -> int:
    """`rlax-trpo [train] ...`, `eval ...`, `configs ...`, `report ...`; the exit status."""
    from rlax_trpo.errors import ConfigError, RunFailed

    argv = sys.argv[1:] if argv is None else list(argv)
    if peers.in_supervised_child():
        peers.adopt_user_stderr()
    if argv[:1] in (["-h"], ["--help"]):
        print(main_help(f"python {prog}" if prog.endswith(".py") else prog), end="")
        return 0
    command, rest = (argv[0], argv[1:]) if argv[:1] and argv[0] in COMMANDS else ("train", argv)
    mains = {"eval": eval_main, "configs": configs_main, "report": report_main}
    try:
        if command in mains:
            return mains[command](rest, f"{prog} {command}")
        return train_main(rest, f"{prog} train" if prog == "rlax-trpo" else prog)
    except (UsageError, ConfigError) as err:
        return _failed(err, 2)
    except RunFailed as err:
        return _failed(err, err.status)


def _failed(err: Exception, status: int) -> int:
    """One line; in a multi-process run's training child, the process ends here: JAX's exit
    handlers would wait for (or abort on) a peer that is gone."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    if peers.in_supervised_child():
        os._exit(status)
    return status
