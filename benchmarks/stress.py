#!/usr/bin/env python
"""Hang check: many fresh `train.py` processes over 1, 2 and 4 CPU devices, each under a timeout.

Every combination of program (PPO, TRPO, GRPO on CartPole; GRPO on the MaxDigit language
task) and device count runs `--repeats` times as a new process with a 4-member population
sharded over the devices, with XLA's full thread pool. A process that outlives `--timeout`
counts as a hang (its native stacks are saved with gdb when gdb is installed); any other
failure is reported with its exit status. Prints one JSON object and writes it to `--json`.

    python benchmarks/stress.py                         # 4 programs x 3 device counts x 2 = 24 runs
    python benchmarks/stress.py --repeats 1 --devices 2
    python benchmarks/stress.py --programs humanoid --devices 2 --env RLAX_TRPO_LAPACK=keep

`humanoid` (PPO on Playground's HumanoidWalk, MuJoCo physics) is not in the default set.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _publish import fresh_process_env, publish

ROOT = Path(__file__).resolve().parents[1]

PROGRAMS = {
    "ppo": ["total_env_steps=8192"],
    "trpo": ["--config", "configs/trpo_cartpole.yaml", "total_env_steps=8192"],
    "grpo": [
        "--config",
        "configs/grpo_cartpole.yaml",
        "num_envs=16",
        "num_steps=200",
        "total_env_steps=12800",
    ],  # fmt: skip
    "lm": [
        "--config",
        "configs/grpo_lm_max_digit.yaml",
        "num_iterations=4",
        "eval_every=2",
        "eval_size=64",
        "num_prompts=8",
    ],  # fmt: skip
    # MuJoCo physics: a batched Cholesky of each env's 27x27 mass matrix in every step
    # (docs/upstream/cpu_lapack_deadlock.md); not in the default set, it compiles for about a
    # minute.
    "humanoid": [
        "--config",
        "configs/ppo_playground_cheetah_run.yaml",
        "env=playground/HumanoidWalk",
        "num_steps=16",
        "num_minibatches=4",
        "total_env_steps=4096",
        "eval_episodes=2",
    ],  # fmt: skip
}
DEFAULT_PROGRAMS = ["ppo", "trpo", "grpo", "lm"]


def run_one(name: str, devices: int, timeout: float, out: Path, extra: dict[str, str]) -> dict:
    cmd = [sys.executable, "train.py", "--no-progress", "--seeds", "4",
           "--devices", str(devices), "--out", str(out), *PROGRAMS[name]]  # fmt: skip
    stacks = out.parent / f"{out.name}.stacks.txt"
    return {"program": name, "devices": devices, **run_fresh(cmd, extra, timeout, stacks)}


def run_fresh(cmd: list[str], extra: dict[str, str], timeout: float, stacks: Path) -> dict:
    """`cmd` as a fresh process in the repository root (`_publish.fresh_process_env(extra)`)
    under `timeout`: its status ("ok", "failed (exit N)" or "hung"), seconds, the last line
    of stderr when it failed, and where gdb saved the native stacks of a hang."""
    env = fresh_process_env(extra)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        _, err = proc.communicate(timeout=timeout)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
        saved = None
    except subprocess.TimeoutExpired:
        status, saved = "hung", _stacks(proc.pid, stacks)
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
    row = {"status": status, "seconds": round(time.perf_counter() - t0, 1)}
    if status.startswith("failed"):
        row["stderr"] = err.strip().splitlines()[-1:] if err else []
    if saved:
        row["stacks"] = saved
    return row


def _stacks(pid: int, path: Path) -> str | None:
    if shutil.which("gdb") is None:
        return None
    with path.open("w") as f:
        subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                       stdout=f, stderr=subprocess.DEVNULL, timeout=120)  # fmt: skip
    return str(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--programs", nargs="+", default=DEFAULT_PROGRAMS, choices=list(PROGRAMS))
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the runs, e.g. RLAX_TRPO_LAPACK=keep",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is hung")
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name in args.programs:
                for d in args.devices:
                    row = run_one(name, d, args.timeout, Path(tmp) / f"{name}_{d}_{r}", extra)
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    rows.append(row)
    publish(
        "stress",
        {
            "env": extra,
            "runs": len(rows),
            "hangs": sum(r["status"] == "hung" for r in rows),
            "failures": sum(r["status"].startswith("failed") for r in rows),
            "rows": rows,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
