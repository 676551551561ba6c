"""The README's first command as a new user runs it: `python train.py` (PPO on CartPole-v1,
the default configuration) in a fresh process, timed as a whole, with its own training and
compile times and its final return.

    python benchmarks/first_run.py                                  # the default run
    python benchmarks/first_run.py --json benchmarks/results/first_run_2core.json
    python benchmarks/first_run.py total_env_steps=20000            # overrides pass through
    python benchmarks/first_run.py --fresh-venv --json benchmarks/results/first_install_2core.json

Each run starts from an empty compilation cache (`_publish.fresh_process_env`), so the
whole-process time is what a first run costs; `--repeats` gives the spread. `--fresh-venv`
first times the README's install as a new machine runs it: a new virtual environment and
`pip install -e .` with pip's cache off (every package fetched and unpacked from the
registry), then runs `train.py` with that environment's Python; the environment's size on
disk is reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _publish import parse_with_overrides, publish, timed_train

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument(
        "--fresh-venv",
        action="store_true",
        help="time `python -m venv` and `pip install -e .` (no pip cache) first, then run "
        "train.py with that environment",
    )
    args = parse_with_overrides(parser, argv)
    venv = Path(tempfile.mkdtemp(prefix="first_install_")) / "venv"
    figures: dict = {}
    python = sys.executable
    try:
        if args.fresh_venv:
            figures["install"] = _install(venv)
            python = str(venv / "bin" / "python")
        figures.update(_runs(python, args))
    finally:
        shutil.rmtree(venv.parent, ignore_errors=True)
    publish("first_run", figures, args.json)


def _install(venv: Path) -> dict:
    """The README's install in a new virtual environment, timed: venv, then pip."""
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", "."]
    proc = subprocess.run(pip, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"pip install -e . failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    packages = sorted(p["name"].lower() for p in json.loads(listed.stdout))
    print(f"pip install -e . in a new venv: {seconds:.1f} s, {size / 2**30:.2f} GiB", flush=True)
    return {
        "command": "python -m venv venv && venv/bin/python -m pip install -e . (no pip cache)",
        "seconds": seconds,
        "venv_gib": size / 2**30,
        "packages": len(packages),
        "suites_installed": [
            p for p in ("brax", "playground", "jumanji", "craftax") if p in packages
        ],
    }


def _runs(python: str, args: argparse.Namespace) -> dict:
    runs = []
    for _ in range(args.repeats):
        wall, summary = timed_train(python, args.overrides, ROOT)
        runs.append(
            {
                "process_seconds": wall,
                "training_seconds": summary["wall_seconds"],
                "compile_seconds": summary["compile_seconds"],
                "final_return_mean": summary["final_return_mean"],
                "total_env_steps": summary["total_env_steps"],
            }
        )
        print(
            f"python train.py: {wall:.1f} s in all, {summary['wall_seconds']:.1f} s of training "
            f"after a {summary['compile_seconds']:.1f} s compile; final return "
            f"{summary['final_return_mean']:.1f}",
            flush=True,
        )
    walls = sorted(r["process_seconds"] for r in runs)
    return {"runs": runs, "process_seconds_median": walls[len(walls) // 2]}


if __name__ == "__main__":
    main()
