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

import os
import sys

from rlax_trpo.cli.commands import (
    _report,
    configs_main,
    eval_main,
    report_main,
    tiny_lm_main,
    train_main,
)
from rlax_trpo.cli.parsers import (
    Parser,
    build_configs_parser,
    build_eval_parser,
    build_parser,
)
from rlax_trpo.errors import UsageError
from rlax_trpo.experiment import peers, runlog

__all__ = [
    "COMMANDS",
    "Parser",
    "build_configs_parser",
    "build_eval_parser",
    "build_parser",
    "configs_main",
    "eval_main",
    "main",
    "main_help",
    "report_main",
    "runlog",
    "tiny_lm_main",
    "train_main",
    "_report",
]


COMMANDS = {
    "train": "train a population of seeds x settings and write its run folder (the default)",
    "eval": "evaluate a finished run folder: greedy and sampling returns, a GIF",
    "configs": "list the bundled configurations; --show NAME prints one whole",
    "report": "statistics over finished runs (rliable): tables, intervals, figures",
    "tiny-lm": "write a small pretrained language model (Hugging Face layout) for the CPU configs",
}


def main_help(prog: str = "rlax-trpo") -> str:
    """`rlax-trpo --help`: the commands, one line each."""
    lines = [
        f"usage: {prog} [train] [options] [key=value ...]",
        f"       {prog} eval --run DIR [options]",
        f"       {prog} configs [--show NAME [key=value ...]]",
        f"       {prog} report PATH [PATH ...] [--out DIR] [options]",
        f"       {prog} tiny-lm --out DIR [options]",
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

    process = argv is None  # the command itself (train.py, rlax-trpo), not a call from Python
    argv = sys.argv[1:] if argv is None else list(argv)
    if peers.in_supervised_child():
        peers.adopt_user_stderr()
    if argv[:1] in (["-h"], ["--help"]):
        print(main_help(f"python {prog}" if prog.endswith(".py") else prog), end="")
        return 0
    command, rest = (argv[0], argv[1:]) if argv[:1] and argv[0] in COMMANDS else ("train", argv)
    misspelt = _misspelt_command(argv[0]) if argv and argv[0] not in COMMANDS else None
    if misspelt is not None:
        return _failed(UsageError(misspelt), 2)
    mains = {
        "eval": eval_main,
        "configs": configs_main,
        "report": report_main,
        "tiny-lm": tiny_lm_main,
    }
    try:
        if command in mains:
            return mains[command](rest, f"{prog} {command}")
        return train_main(rest, f"{prog} train" if prog == "rlax-trpo" else prog, process)
    except (UsageError, ConfigError) as err:
        return _failed(err, 2)
    except RunFailed as err:
        return _failed(err, err.status)


def _misspelt_command(word: str) -> str | None:
    """The line for a first word that is neither an option nor `key=value` and is close to a
    command's name (`trian`); None for anything else."""
    import difflib

    if word.startswith("-") or "=" in word:
        return None
    close = difflib.get_close_matches(word, list(COMMANDS), n=1, cutoff=0.6)
    if not close:
        return None
    return f"{word!r}: no such command (did you mean {close[0]}? `rlax-trpo --help` lists them)"


def _failed(err: Exception, status: int) -> int:
    """One line; in a multi-process run's training child, the process ends here: JAX's exit
    handlers would wait for (or abort on) a peer that is gone."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    if peers.in_supervised_child():
        os._exit(status)
    return status
