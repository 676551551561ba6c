#!/usr/bin/env python
"""The persistent compilation cache: a run's compile time with the cache cold and warm.

Each repeat takes an empty cache folder (`XDG_CACHE_HOME` in a scratch folder, no
JAX_COMPILATION_CACHE_DIR) and runs, each as a fresh process as a user types it:

    python train.py --out A [overrides]        cold: compiles every program, fills the cache
    python train.py --out B [overrides]        warm: the same config into another folder
    python train.py --out E --single-call [overrides]   one lax.scan: its training seconds
    python train.py --out C [overrides] total_env_steps=50000    budget cold (a cache of its own)
    python train.py --out D [overrides] total_env_steps=100000   budget warm (--budgets A,B)
    python train.py eval --run A               cold (its own empty cache folder)
    python train.py eval --run A               warm

The budget pair is the claim that a change of budget is a cache read (the iteration count
of a call and the annealing horizon are inputs of the one segment program); B against E is
what computing a run in segment calls costs against one `lax.scan` (summary.json's
`wall_seconds`, compilation excluded).

and records `compile_seconds` from each run's summary.json; for every command, its wall time
and what jax reports of its compilation (`jax.monitoring`): tracing, lowering to MLIR, and
XLA's compile or the cache's read. The reference is the cold command of the same repeat; the
machine's load average is recorded beside each command (a shared machine's timings are noisy:
run several repeats).

    python benchmarks/compile_cache.py --json benchmarks/results/compile_cache_2core.json
    python benchmarks/compile_cache.py --repeats 1 num_envs=64 "hidden_sizes=[128,128]"

Published: docs/operations.md (the compilation cache).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _publish import fresh_process_env, publish

from rlax_trpo.experiment.compile_cache import CACHE_VARIABLES

ROOT = Path(__file__).resolve().parents[1]

# The command, run under jax.monitoring listeners; prints their sums as a last JSON line.
TIMED = """
import collections, json, sys, time
import jax.monitoring
seconds = collections.defaultdict(float)
jax.monitoring.register_event_duration_secs_listener(
    lambda name, s, **kw: seconds.__setitem__(name, seconds[name] + s))
from rlax_trpo.cli import main
code = main(sys.argv[1:], prog="train.py")
names = {"trace": "/jax/core/compile/jaxpr_trace_duration",
         "lower": "/jax/core/compile/jaxpr_to_mlir_module_duration",
         "compile_or_read": "/jax/core/compile/backend_compile_duration",
         "read": "/jax/compilation_cache/cache_retrieval_time_sec"}
print(json.dumps({k: round(seconds[v], 2) for k, v in names.items()}), file=sys.stderr)
sys.exit(code)
"""


def command(argv: list[str], cache_home: Path) -> dict:
    """One fresh process of `train.py argv` with its cache in `cache_home`: wall seconds,
    jax's compilation figures, the load average before it."""
    env = {k: v for k, v in fresh_process_env({}).items() if k not in CACHE_VARIABLES}
    env["XDG_CACHE_HOME"] = str(cache_home)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", TIMED, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"train.py {' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
    jax_seconds = json.loads(proc.stderr.strip().splitlines()[-1])
    return {"wall_seconds": round(wall, 1), "load_average": round(load, 2), **jax_seconds}


def repeat(scratch: Path, overrides: list[str], budgets: tuple[int, int]) -> dict:
    """Cold and warm training, then cold and warm evaluation of the cold run's folder."""
    a = scratch / "a"
    train_cache, eval_cache = scratch / "train_cache", scratch / "eval_cache"
    budget_cache = scratch / "budget_cache"
    figures = {}
    for name, cache, more in (
        ("train_cold", train_cache, []),
        ("train_warm", train_cache, []),
        ("train_single_call", train_cache, ["--single-call"]),
        ("budget_cold", budget_cache, [f"total_env_steps={budgets[0]}"]),
        ("budget_warm", budget_cache, [f"total_env_steps={budgets[1]}"]),
    ):
        out = a if name == "train_cold" else scratch / name
        figures[name] = command(["--out", str(out), *overrides, *more], cache)
        summary = json.loads((out / "summary.json").read_text())
        figures[name]["compile_seconds"] = round(summary["compile_seconds"], 2)
        figures[name]["train_seconds"] = round(summary["wall_seconds"], 2)
    for name in ("eval_cold", "eval_warm"):
        figures[name] = command(["eval", "--run", str(a)], eval_cache)
        jax_seconds = ("trace", "lower", "compile_or_read")
        figures[name]["compile_seconds"] = round(sum(figures[name][k] for k in jax_seconds), 2)
    entries = list(train_cache.rglob("*-cache"))
    figures["cache_entries"] = len(entries)
    figures["cache_bytes"] = sum(p.stat().st_size for p in entries)
    return figures


def summarize(repeats: list[dict]) -> dict:
    """Per repeat, warm compile seconds over cold (the budget pair's too) and segmented
    training seconds over the single call's; their medians."""
    ratios = {}
    for kind in ("train", "eval", "budget"):
        each = [r[f"{kind}_warm"]["compile_seconds"] / r[f"{kind}_cold"]["compile_seconds"]
                for r in repeats]  # fmt: skip
        ratios[f"{kind}_warm_over_cold"] = [round(x, 3) for x in each]
        ratios[f"{kind}_warm_over_cold_median"] = round(statistics.median(each), 3)
    each = [r["train_warm"]["train_seconds"] / r["train_single_call"]["train_seconds"]
            for r in repeats]  # fmt: skip
    ratios["segments_over_single_call_train_seconds"] = [round(x, 3) for x in each]
    ratios["segments_over_single_call_train_seconds_median"] = round(statistics.median(each), 3)
    return ratios


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path)
    p.add_argument("--budgets", default="50000,100000", metavar="A,B",
                   help="total_env_steps of the budget pair (after the overrides)")  # fmt: skip
    p.add_argument("overrides", nargs="*", metavar="key=value", help="added to train commands")
    args = p.parse_args()
    budgets = tuple(int(x) for x in args.budgets.split(","))
    if len(budgets) != 2:
        p.error("--budgets takes two budgets: A,B")
    repeats = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="compile-cache-") as scratch:
            repeats.append(repeat(Path(scratch), args.overrides, budgets))
        print(json.dumps({"repeat": i, **repeats[-1]}), flush=True)
    publish(
        "compile_cache",
        {"cores": os.cpu_count(), "overrides": args.overrides, "budgets": list(budgets),
         **summarize(repeats),
         "repeats": repeats},
        args.json,
    )  # fmt: skip


if __name__ == "__main__":
    main()
