#!/usr/bin/env python
"""Env steps/s against device count: the same `train.py` command on one device and on all.

For each program (PPO with the default config, TRPO with configs/trpo_cartpole.yaml, GRPO
with configs/grpo_cartpole.yaml at a smaller budget), 8 seeds, it runs `train.py` as a fresh
process with `--devices 1` and with the default (one CPU device per core), alternating,
`--repeats` times each, and reads `env_steps_per_second` (compile excluded) from the run's
summary.json. The reference is the one-device run of the same command in the same
invocation. `--threefry` adds the default command with jax's own rolled threefry lowering
(`RLAX_TRPO_THREEFRY=rolled`), to check that the straight-line lowering still pays.

    python benchmarks/device_scaling.py --json benchmarks/results/device_scaling_2core.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _publish import fresh_process_env, publish

ROOT = Path(__file__).resolve().parents[1]

PROGRAMS = {
    "ppo": [],
    "trpo": ["--config", "configs/trpo_cartpole.yaml"],
    "grpo": ["--config", "configs/grpo_cartpole.yaml", "total_env_steps=256000"],
}


def measure(args: list[str], env_extra: dict[str, str], out: Path) -> dict:
    env = fresh_process_env(env_extra)
    cmd = [sys.executable, "train.py", "--no-progress", "--out", str(out), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    s = json.loads((out / "summary.json").read_text())
    return {
        "env_steps_per_second": round(s["env_steps_per_second"]),
        "num_devices": s["num_devices"],
        "wall_seconds": round(s["wall_seconds"], 1),
        "compile_seconds": round(s["compile_seconds"], 1),
        "final_return_mean": s["final_return_mean"],
        "eval_return_mean": s.get("eval_return_mean"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threefry", action="store_true", help="also time jax's rolled threefry")
    p.add_argument("--json", type=Path)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="added to every command")
    args = p.parse_args()
    variants = {"one_device": (["--devices", "1"], {}), "all_cores": ([], {})}
    if args.threefry:
        variants["all_cores_rolled_threefry"] = ([], {"RLAX_TRPO_THREEFRY": "rolled"})
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.programs:
            runs: dict[str, list[dict]] = {v: [] for v in variants}
            for r in range(args.repeats):
                for v, (extra, env) in variants.items():
                    cmd = [*PROGRAMS[name], *args.overrides, "--seeds", str(args.seeds), *extra]
                    row = measure(cmd, env, Path(tmp) / f"{name}_{v}_{r}")
                    runs[v].append(row)
                    print(json.dumps({"program": name, "variant": v, **row}), file=sys.stderr)
            best = {v: max(x["env_steps_per_second"] for x in rows) for v, rows in runs.items()}
            command = [
                "python train.py",
                *PROGRAMS[name],
                *args.overrides,
                "--seeds",
                str(args.seeds),
            ]
            results[name] = {
                "command": " ".join(command),
                "best_env_steps_per_second": best,
                "speedup_all_cores_vs_one_device": round(best["all_cores"] / best["one_device"], 2),
                "runs": runs,
            }
    publish("device_scaling", {"results": results}, args.json)


if __name__ == "__main__":
    main()
