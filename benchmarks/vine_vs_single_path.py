#!/usr/bin/env python
"""Vine against single-path TRPO at equal env steps (the branches' steps count in the budget).

Each task runs both estimators with the same config, budget and seeds, every seed set in one
compiled vmapped call, and records each seed's final return (the mean return of the episodes
finished in the last 10% of iterations, as `summary.json`'s `final_return_mean`) and the
learning curve against env steps.

    python benchmarks/vine_vs_single_path.py --seeds 4 \\
        --json benchmarks/results/vine_vs_single_path_2core.json \\
        --figure docs/figures/vine_vs_single_path.png
    python benchmarks/vine_vs_single_path.py --tasks cartpole --seeds 1 total_env_steps=8192

Trailing `KEY=VALUE` overrides apply to every run (both estimators), those after `--vine` to
the vine's runs only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _publish import publish  # noqa: E402

# task -> (config, overrides of the task, overrides of the vine)
TASKS = {
    "cartpole": ("trpo_cartpole", [], ["vine_states=32", "vine_horizon=16"]),
    "acrobot": (
        "trpo_cartpole",
        ["env=Acrobot-v1", "total_env_steps=200000"],
        ["vine_states=32", "vine_horizon=16"],
    ),
    "pendulum": (
        "trpo_pendulum",
        [],
        ["vine_states=64", "vine_actions=4", "vine_horizon=16"],
    ),
}


def final_return(metrics: dict) -> np.ndarray:
    """Per seed: mean return of the episodes that ended in the last 10% of iterations."""
    sums, counts = np.asarray(metrics["episode/return_sum"]), np.asarray(metrics["episode/count"])
    tail = max(1, sums.shape[1] // 10)
    return sums[:, -tail:].sum(1) / np.maximum(counts[:, -tail:].sum(1), 1)


def run(config_name: str, overrides: list[str], seeds: int) -> dict:
    import jax

    from rlax_trpo.config import load_config
    from rlax_trpo.training import make_trainer

    config = load_config(config_name, overrides)
    trainer = make_trainer(config)
    train = jax.jit(jax.vmap(trainer.train, (0, None)))
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    start = time.perf_counter()
    _, metrics = jax.block_until_ready(train(keys, config.hp))
    wall = time.perf_counter() - start
    curve = np.asarray(metrics["episode/return"])
    every = max(1, curve.shape[1] // 40)
    return {
        "overrides": overrides,
        "steps_per_iteration": trainer.steps_per_iteration,
        "iterations": trainer.num_iterations,
        "env_steps": trainer.num_iterations * trainer.steps_per_iteration,
        "wall_seconds_with_compile": round(wall, 1),
        "final_return": final_return(metrics).round(1),
        "final_return_mean": round(float(final_return(metrics).mean()), 1),
        "curve_env_steps": (np.arange(curve.shape[1])[::every] + 1) * trainer.steps_per_iteration,
        "curve_return": curve[:, ::every].round(1),
    }


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.4), squeeze=False)
    for ax, (task, runs) in zip(axes[0], results.items(), strict=True):
        for name, r in runs.items():
            x, y = np.asarray(r["curve_env_steps"]), np.asarray(r["curve_return"])
            ax.plot(x, y.mean(0), label=f"{name} ({r['final_return_mean']})")
            ax.fill_between(x, y.min(0), y.max(0), alpha=0.2)
        ax.set_title(task)
        ax.set_xlabel("env steps (branches included)")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("episode return (mean, min-max over seeds)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--figure", type=Path)
    parser.add_argument("--vine", nargs="*", default=[], help="KEY=VALUE for the vine runs")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE for every run")
    args = parser.parse_args()
    results = {}
    for task in args.tasks:
        config_name, task_overrides, vine_overrides = TASKS[task]
        base = task_overrides + args.overrides
        results[task] = {
            "single_path": run(config_name, base, args.seeds),
            "vine": run(
                config_name, base + ["sampling=vine", *vine_overrides, *args.vine], args.seeds
            ),
        }
        for name, r in results[task].items():
            print(f"{task:9s} {name:12s} {r['env_steps']:>9,} steps  final {r['final_return']}")
    if args.figure is not None:
        plot(results, args.figure)
    publish("vine_vs_single_path", {"seeds": args.seeds, "tasks": results}, args.json)


if __name__ == "__main__":
    main()
