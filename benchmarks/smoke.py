#!/usr/bin/env python
"""Smoke run of every benchmark script at a tiny budget: each must still start, run and print
its figures (CI runs this after the tests). The figures of a smoke run mean nothing; the
published ones come from the commands in each script's docstring.

    python benchmarks/smoke.py            # every script
    python benchmarks/smoke.py shuffle    # the scripts whose names contain these words

Each script runs as its own process under a time limit, two at a time (`--jobs`), in a
scratch folder for its outputs. Exit status 1 if any failed; a script whose optional suite
(Brax, MuJoCo Playground) is not installed is reported as skipped.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlax_trpo.platform import FAST_COMPILE_XLA_FLAGS

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TINY_RUN = ["total_env_steps=1024", "num_envs=4", "num_steps=16", "eval_episodes=2"]

# script -> (command with {out} for its own scratch folder, modules it needs)
SMOKE = {
    "brax_ppo.py": (
        [PY, "benchmarks/brax_ppo.py", "--envs", "brax/inverted_pendulum", "--steps", "8192",
         "--eval-envs", "2"],
        ("brax",),
    ),
    "cg_convergence.py": (
        [PY, "benchmarks/cg_convergence.py", "{out}/run", "--iters", "2", "--reference", "4",
         "--holdout", "--train", "trpo_cartpole", *TINY_RUN],
        (),
    ),
    "stop_latency.py": (
        [PY, "benchmarks/stop_latency.py", "--repeats", "1", "--delay", "0", *TINY_RUN],
        (),
    ),
    "compile_cache.py": (
        [PY, "benchmarks/compile_cache.py", "--repeats", "1", "--budgets", "512,1024", *TINY_RUN],
        (),
    ),
    "cpu_linalg.py": (
        [PY, "benchmarks/cpu_linalg.py", "--programs", "brax_inverted_pendulum", "--seeds", "1",
         "--repeats", "1", "total_env_steps=2048", "num_envs=4", "num_steps=16"],
        ("brax",),
    ),
    # It trains Craftax_Baselines' own code from a clone, which CI does not have: the options only.
    "craftax_baselines.py": ([PY, "benchmarks/craftax_baselines.py", "--help"], ()),
    # It trains jumanji/training's A2C, which needs dm-haiku and rlax (not installed): the options.
    "jumanji_a2c.py": ([PY, "benchmarks/jumanji_a2c.py", "--help"], ()),
    "craftax_scores.py": (
        [PY, "benchmarks/craftax_scores.py", "--json", "{out}/craftax_scores.json"],
        ("craftax",),
    ),
    "device_scaling.py": (
        [PY, "benchmarks/device_scaling.py", "--programs", "ppo", "--seeds", "2", "--repeats", "1",
         *TINY_RUN],
        (),
    ),
    "entropy_by_state.py": (
        [PY, "benchmarks/entropy_by_state.py", "{out}/run", "--steps", "20", "--envs", "4",
         "--train", "trpo_minatar", *TINY_RUN],
        (),
    ),
    "gpu_suite.py": (
        [PY, "benchmarks/gpu_suite.py", "{out}/gpu_suite", "--budget", "tiny", "--steps", "env",
         "learning"],
        (),
    ),
    "gpu_wheels.sh": (["bash", "-n", "benchmarks/gpu_wheels.sh"], ()),  # syntax only: it downloads
    "grpo_lm_losses.py": (
        [PY, "benchmarks/grpo_lm_losses.py", "--tasks", "max_digit", "--variants", "grpo", "cispo",
         "gspo", "--seeds", "1", "num_iterations=2", "num_prompts=4", "group_size=4"],
        (),
    ),
    "grpo_lm.py": (
        [PY, "benchmarks/grpo_lm.py", "--config", "configs/grpo_lm_max_digit.yaml", "--repeats",
         "1", "num_prompts=4", "group_size=4"],
        (),
    ),
    "lapack_one_device.py": (
        [PY, "benchmarks/lapack_one_device.py", "--processes", "1", "--envs", "2", "--steps", "2"],
        ("mujoco_playground",),
    ),
    "lm_throughput.py": (
        [PY, "benchmarks/lm_throughput.py", "--tiny", "--json", "{out}/lm_throughput.json"],
        ("torch", "transformers", "trl", "datasets"),
    ),
    "bundled_table.py": (
        [PY, "benchmarks/bundled_table.py", "--only", "ppo_cartpole", "--results",
         "{out}/bundled", "--extra", *TINY_RUN],
        (),
    ),
    "first_run.py": (
        [PY, "benchmarks/first_run.py", "--repeats", "1", "total_env_steps=4096"],
        (),
    ),
    "lm_word_problems.py": (
        [PY, "benchmarks/lm_word_problems.py", "--out", "{out}", "--steps", "4", "--seeds",
         "1000", "--no-full", "--json", "{out}/lm_word_problems.json", "num_iterations=2",
         "eval_every=2", "eval_size=8", "num_prompts=2", "group_size=2", "max_new_tokens=8",
         "--tiny-lm", "--width", "32", "--layers", "1", "--vocab-size", "300"],
        (),
    ),
    "lm_trust_regions.py": (
        [PY, "benchmarks/lm_trust_regions.py", "--out", "{out}", "--steps", "4", "--seeds",
         "1000", "--updates", "dppo_tv", "trpo", "--json", "{out}/lm_trust_regions.json",
         "num_iterations=2", "eval_every=2",
         "eval_size=8", "num_prompts=2", "group_size=2", "max_new_tokens=8",
         "--tiny-lm", "--width", "32", "--layers", "1", "--vocab-size", "300"],
        (),
    ),
    "pbt_vs_grid.py": (
        [PY, "benchmarks/pbt_vs_grid.py", "--population", "2", "--repeats", "1", "--ready", "2",
         "--json", "{out}/pbt.json", "--plot", "{out}/pbt.png", *TINY_RUN],
        (),
    ),
    "memory_vs_purejaxrl.py": (
        [PY, "benchmarks/memory_vs_purejaxrl.py", "--total-steps", "2048", "memory_size=8",
         "hidden_sizes=[8]"],
        (),
    ),
    "reset_ratio.py": (
        [PY, "benchmarks/reset_ratio.py", "--config", "ppo_cartpole", "--ratios", "1", "4",
         "--iterations", "1", "--repeats", "1", "--env-steps", "4", "num_envs=16", "num_steps=8",
         "hidden_sizes=[16]", "num_minibatches=1"],
        (),
    ),
    "memory_analysis.py": ([PY, "benchmarks/memory_analysis.py", "trpo_memory_cartpole",
                            "--seeds", "2", "--largest", "3", "num_envs=8", "num_steps=16"], ()),
    "profile_ppo.py": (
        [PY, "benchmarks/profile_ppo.py", "--num-envs", "8", "--iterations", "2", "--repeats",
         "1", "--trace", "num_steps=16", "compute_dtype=bfloat16"],
        (),
    ),
    "shuffle.py": ([PY, "benchmarks/shuffle.py", "--sizes", "256", "--iters", "10", "--repeats",
                    "1"], ()),
    "standard_tables.py": (
        [PY, "benchmarks/standard_tables.py", "minatar", "--algos", "ppo", "--games",
         "Breakout-MinAtar", "--budget", "32768", "--seeds", "2", "--runs", "{out}/runs",
         "--results", "{out}/results", "--sweep", "hp.learning_rate=1e-3,2e-3", "num_envs=16",
         "num_steps=64", "hidden_sizes=[16]"],
        (),
    ),
    "stress.py": (
        [PY, "benchmarks/stress.py", "--programs", "ppo", "--devices", "2", "--repeats", "1"],
        (),
    ),
    "throughput.py": (
        [PY, "benchmarks/throughput.py", "--num-envs", "4", "--total-steps", "1024", "--repeats",
         "1"],
        (),
    ),
    "trpo_update.py": (
        [PY, "benchmarks/trpo_update.py", "--config", "trpo_cartpole", "--field",
         "line_search_batch", "--values", "0", "1", "--repeats", "2", *TINY_RUN],
        (),
    ),
    "update_holdout.py": (
        [PY, "benchmarks/update_holdout.py", "{out}/run", "--holdout", "1", "--variant",
         "anneal_lr=false", "--train", "ppo_cartpole", *TINY_RUN],
        (),
    ),
    "trpo_vs_sb3.py": (
        [PY, "benchmarks/trpo_vs_sb3.py", "--steps", "2048", "--seeds", "1", "--no-sb3"],
        (),
    ),
    "vine_vs_single_path.py": (
        [PY, "benchmarks/vine_vs_single_path.py", "--tasks", "cartpole", "pendulum", "--seeds",
         "1", "--figure", "{out}/vine.png", "--vine", "vine_states=8", "vine_horizon=4", "--",
         "total_env_steps=3072", "num_envs=2", "num_steps=64"],
        (),
    ),
}  # fmt: skip


def scripts() -> list[str]:
    """The benchmark scripts (helpers start with an underscore; this runner is not one)."""
    return sorted(
        p.name
        for p in (ROOT / "benchmarks").iterdir()
        if p.suffix in (".py", ".sh") and not p.name.startswith("_") and p.name != "smoke.py"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("words", nargs="*", help="only scripts whose names contain these")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per script")
    parser.add_argument(
        "--jobs", type=int, default=2, help="scripts run at a time, each its own process"
    )
    args = parser.parse_args()
    missing = sorted(set(scripts()) - set(SMOKE))
    if missing:
        print(f"no smoke command for: {', '.join(missing)}", file=sys.stderr)
        return 1
    chosen = [s for s in scripts() if not args.words or any(w in s for w in args.words)]
    failed = []
    # A smoke run's figures mean nothing, so its programs compile with the fast-compile flags.
    # (Scripts that time fresh train.py processes pass them on: benchmarks/_publish.py.)
    env = {
        **os.environ,
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE_XLA_FLAGS}",
        "RLAX_TRPO_CHILD_XLA_FLAGS": FAST_COMPILE_XLA_FLAGS,
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-smoke-") as out:

        def smoke(name: str) -> tuple[str, object, str, float]:
            command, needs = SMOKE[name]
            absent = [m for m in needs if importlib.util.find_spec(m) is None]
            if absent:
                return name, "skipped", f"{', '.join(absent)} not installed", 0.0
            # a scratch folder per script: two scripts run at once may name the same output
            scratch = os.path.join(out, Path(name).stem)
            os.makedirs(scratch)
            cmd = [c.replace("{out}", scratch) for c in command]
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env,
                                      timeout=args.timeout)  # fmt: skip
                code, tail = proc.returncode, (proc.stdout + proc.stderr).strip()[-1500:]
            except subprocess.TimeoutExpired:
                code, tail = "timeout", f"no result within {args.timeout:.0f} s"
            return name, code, tail, time.perf_counter() - t0

        # Most of a smoke run is compiling, which takes one core: run `--jobs` at a time.
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for name, code, tail, seconds in pool.map(smoke, chosen):
                if code == "skipped":
                    print(f"skipped {name:22s} ({tail})", flush=True)
                    continue
                word = "ok     " if code == 0 else "FAILED "
                print(f"{word} {name:22s} {seconds:6.1f} s", flush=True)
                if code != 0:
                    failed.append(name)
                    print("    " + tail.replace("\n", "\n    "), flush=True)
    minutes = (time.perf_counter() - start) / 60
    print(f"{len(chosen) - len(failed)} of {len(chosen)} benchmark scripts ran ({minutes:.1f} min)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
