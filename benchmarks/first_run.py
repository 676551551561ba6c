"""The README's first command as a new user runs it: `python train.py` (PPO on CartPole-v1,
the default configuration) in a fresh process, timed as a whole, with its own training and
compile times and its final return.

    python benchmarks/first_run.py                                  # the default run
    python benchmarks/first_run.py --json benchmarks/results/first_run_2core.json
    python benchmarks/first_run.py total_env_steps=20000            # overrides pass through

Each run starts from an empty compilation cache (`_publish.fresh_process_env`), so the
whole-process time is what a first run costs; `--repeats` gives the spread.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _publish import fresh_process_env, parse_with_overrides, publish

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parse_with_overrides(parser, argv)
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as out:
            cmd = [sys.executable, "train.py", "--out", f"{out}/run", "--no-progress",
                   *args.overrides]  # fmt: skip
            start = time.perf_counter()
            proc = subprocess.run(
                cmd, cwd=ROOT, env=fresh_process_env({}), capture_output=True, text=True
            )
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                sys.exit(f"train.py failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
            summary = json.loads((Path(out) / "run" / "summary.json").read_text())
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
    figures = {"runs": runs, "process_seconds_median": walls[len(walls) // 2]}
    publish("first_run", figures, args.json)


if __name__ == "__main__":
    main()
