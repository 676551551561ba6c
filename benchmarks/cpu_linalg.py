#!/usr/bin/env python
"""Env steps/s of MuJoCo-physics training with LAPACK-free linear algebra against jaxlib's LAPACK.

MuJoCo physics (Brax, Playground MJX) factorises every environment's mass matrix with a
Cholesky and triangular solves. `rlax_trpo.platform.setup_cpu` lowers those on CPU as plain
HLO (unrolled up to 32 rows, XLA's expanders above; `rlax_trpo.small_linalg`), because
jaxlib 0.10's batched LAPACK kernels can deadlock XLA's thread pool on any device count
(docs/upstream/cpu_lapack_deadlock.md). This runs the same `train.py` command as a fresh
process with the library's lowering (`RLAX_TRPO_LAPACK=hlo`) and with `RLAX_TRPO_LAPACK=keep`,
alternating, `--repeats` times each, on one device (where these runs finished with both
lowerings), and reads `env_steps_per_second` (compile excluded) from
summary.json. The reference is the LAPACK run in the same invocation.

    python benchmarks/cpu_linalg.py --repeats 1 --json benchmarks/results/cpu_linalg_2core.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _publish import publish
from device_scaling import measure

PROGRAMS = {
    "playground_cartpole_balance": [
        "--config", "configs/ppo_playground_cartpole_balance.yaml", "total_env_steps=131072",
    ],
    "brax_inverted_pendulum": [
        "--config", "configs/ppo_brax_inverted_pendulum.yaml", "total_env_steps=131072",
    ],
    "playground_humanoid_walk": [
        "--config", "configs/ppo_playground_cheetah_run.yaml", "env=playground/HumanoidWalk",
        "num_steps=32", "num_minibatches=4", "total_env_steps=8192", "eval_episodes=2",
    ],
}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", type=Path)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="added to every command")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.programs:
            cmd = [*PROGRAMS[name], *args.overrides, "--seeds", str(args.seeds), "--devices", "1"]
            runs = {"hlo": [], "lapack": []}
            for r in range(args.repeats):
                for lowering in ("hlo", "lapack"):
                    env = {"RLAX_TRPO_LAPACK": "keep" if lowering == "lapack" else "hlo"}
                    out = Path(tmp) / f"{name}_{lowering}_{r}"
                    runs[lowering].append(measure(cmd, env, out))
            best = {k: max(x["env_steps_per_second"] for x in v) for k, v in runs.items()}
            rows.append({
                "program": name,
                "command": "python train.py --no-progress " + " ".join(cmd),
                "hlo_env_steps_per_second": best["hlo"],
                "lapack_env_steps_per_second": best["lapack"],
                "ratio": round(best["hlo"] / best["lapack"], 3),
                "runs": runs,
            })  # fmt: skip
    publish("cpu_linalg", {"seeds": args.seeds, "repeats": args.repeats, "rows": rows}, args.json)


if __name__ == "__main__":
    main()
