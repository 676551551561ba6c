"""What every benchmark's JSON records beside its figures, and how it is written."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def machine() -> str:
    """The machine a figure was measured on: architecture, core count and CPU model."""
    from rlax_trpo.platform import cpu_name

    return f"{platform.machine()}, {os.cpu_count()} cores, {cpu_name()}"


def fresh_process_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a fresh `train.py` process that a benchmark times: this one's without
    XLA_FLAGS (no forced device count; XLA's default code) and without the per-user
    compilation cache (`compile_seconds` is a compile from nothing), plus `extra`. A smoke run
    (benchmarks/smoke.py), whose figures mean nothing, passes its compile flags on through
    RLAX_TRPO_CHILD_XLA_FLAGS and keeps its cache."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if os.environ.get("RLAX_TRPO_CHILD_XLA_FLAGS"):
        env["XLA_FLAGS"] = os.environ["RLAX_TRPO_CHILD_XLA_FLAGS"]
    else:
        env["RLAX_TRPO_COMPILE_CACHE"] = "0"
    if "XLA_FLAGS" in extra and "XLA_FLAGS" in env:
        extra = {**extra, "XLA_FLAGS": f"{env['XLA_FLAGS']} {extra['XLA_FLAGS']}"}
    return env | extra


def timed_train(python: str, args: list[str], root: Path, what: str = "train.py") -> tuple:
    """`python train.py ARGS --out <scratch> --no-progress` in a fresh process
    (`fresh_process_env`), timed as a whole: (seconds, its summary.json). A failure ends the
    benchmark with its stderr's tail."""
    import subprocess
    import tempfile
    import time

    with tempfile.TemporaryDirectory() as scratch:
        cmd = [python, "train.py", *args, "--out", f"{scratch}/run", "--no-progress"]
        start = time.perf_counter()
        proc = subprocess.run(
            cmd, cwd=root, env=fresh_process_env({}), capture_output=True, text=True
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"{what} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return wall, json.loads((Path(scratch) / "run" / "summary.json").read_text())


def publish(name: str, figures: dict[str, Any], path: Path | None) -> None:
    """Print `figures` with the date, machine, jax version and command; also write them to
    `path` (for benchmarks/results/) when given."""
    import jax

    result = {
        "benchmark": name,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "jax": jax.__version__,
        "command": "python " + " ".join(sys.argv),
        **figures,
    }
    text = json.dumps(
        result, indent=1, default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x)
    )
    print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def parse_with_overrides(parser, argv: list[str] | None):
    """`parser.parse_args` with `key=value` config overrides taken from anywhere on the line.

    argparse gives a `nargs="+"` option (`--num-envs 4 8`) every word after it, so an
    override written after one was read as one of its values (an invalid width). Here each
    word of the form `name=value` that is not the value of an option (`--config x`) is an
    override; the rest is parsed as usual, and the overrides are `args.overrides`, in order.
    """
    import re

    words = list(sys.argv[1:] if argv is None else argv)
    takes_value = {
        flag
        for action in parser._actions
        if action.option_strings and action.nargs is None and action.const is None
        for flag in action.option_strings
    }
    overrides, rest = [], []
    for i, word in enumerate(words):
        after_option = i > 0 and words[i - 1] in takes_value
        if not after_option and re.fullmatch(r"[A-Za-z_][\w.]*=.*", word):
            overrides.append(word)
        else:
            rest.append(word)
    args = parser.parse_args(rest)
    args.overrides = [*getattr(args, "overrides", []), *overrides]
    return args


def run_folder(name: str, run: Path, train: list[str] | None) -> bool:
    """Whether `run` is a run folder, after training `train` (`CONFIG key=value ...`) into it
    when given (a script's `--train`); if not, says so in one line on stderr."""
    import subprocess

    if train:
        cmd = [sys.executable, str(Path(__file__).resolve().parents[1] / "train.py"),
               "--config", train[0], *train[1:], "--no-progress", "--out", str(run)]  # fmt: skip
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    if (run / "config.yaml").is_file():
        return True
    print(f"{name}: {str(run)!r} is not a run folder", file=sys.stderr)
    return False
