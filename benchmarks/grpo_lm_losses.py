#!/usr/bin/env python
"""The GRPO loss family on the three language-model tasks at one equal budget.

Every variant runs the task's bundled config with the same budget overrides (below), the same
seeds (4, one vmapped program per variant) and differs only in its loss keys; the figure is
each seed's greedy exact-match accuracy on the 1000 held-out prompts after training.

    python benchmarks/grpo_lm_losses.py --seeds 4 \\
        --json benchmarks/results/grpo_lm_losses_2core.json
    python benchmarks/grpo_lm_losses.py --tasks max_digit --variants grpo cispo --seeds 1 \\
        num_iterations=2 num_prompts=4 group_size=4

Trailing `KEY=VALUE` overrides apply to every run. `num_minibatches=4` (the default budget)
makes three of every four Adam steps off-policy, so the ratios, and with them the variants'
clipping rules, matter (with one minibatch and one epoch every ratio is 1 and most variants
reduce to the same REINFORCE gradient, up to their aggregation).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _publish import publish  # noqa: E402

# the budget every variant of a task gets
BUDGET = {
    "max_digit": ["num_iterations=150", "num_prompts=16", "num_minibatches=4"],
    "sort": ["num_iterations=150", "num_prompts=16", "num_minibatches=4"],
    "add": ["num_iterations=300", "num_prompts=16", "num_minibatches=4"],
}
GSPO_CLIP = ["hp.clip_eps_low=0.0003", "hp.clip_eps_high=0.0004"]  # the GSPO paper's ranges
VARIANTS = {
    "grpo": ["loss_type=grpo"],
    "dr_grpo": ["loss_type=dr_grpo"],
    "dapo": ["loss_type=dapo"],
    "bnpo": ["loss_type=bnpo"],
    "cispo": ["loss_type=cispo", "hp.clip_eps_high=4.0"],  # weight cap 5 (ScaleRL's eps_max)
    "sapo": ["loss_type=sapo"],
    "luspo": ["loss_type=luspo", "importance_sampling_level=sequence"],
    "vespo": ["loss_type=vespo"],
    "gspo": ["loss_type=grpo", "importance_sampling_level=sequence", *GSPO_CLIP],
    "gspo_token": ["loss_type=grpo", "importance_sampling_level=sequence_token", *GSPO_CLIP],
}


def run_variant(task: str, overrides: list[str], seeds: int, out: Path) -> dict:
    from rlax_trpo import load_config, run

    config = load_config(f"grpo_lm_{task}", overrides)
    start = time.perf_counter()
    summary = run(config, seeds=seeds, out=str(out), progress=False).summary
    accuracy = np.asarray(summary["final_accuracy_per_seed"], float)
    return {
        "overrides": overrides,
        "sequences_per_seed": summary["total_env_steps"],
        "initial_accuracy": round(summary["initial_accuracy"], 3),
        "final_accuracy_per_seed": accuracy.round(3),
        "final_accuracy_mean": round(float(accuracy.mean()), 3),
        "final_accuracy_std": round(float(accuracy.std()), 3),
        "final_completion_length": round(summary["final_completion_length"], 2),
        "wall_seconds": round(summary["wall_seconds"], 1),
        "compile_seconds": round(summary["compile_seconds"], 1),
        "total_seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(BUDGET), choices=list(BUDGET))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--json", type=Path)
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE for every run")
    args = parser.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="grpo-lm-losses-") as scratch:
        for task in args.tasks:
            results[task] = {}
            for name in args.variants:
                overrides = BUDGET[task] + VARIANTS[name] + args.overrides
                r = run_variant(task, overrides, args.seeds, Path(scratch) / f"{task}_{name}")
                results[task][name] = r
                print(
                    f"{task:9s} {name:11s} accuracy {r['final_accuracy_mean']:.3f} "
                    f"+- {r['final_accuracy_std']:.3f} {r['final_accuracy_per_seed']} "
                    f"({r['total_seconds']:.0f} s)",
                    flush=True,
                )
    publish(
        "grpo_lm_losses",
        {"seeds": args.seeds, "budget": BUDGET, "variants": VARIANTS, "tasks": results},
        args.json,
    )


if __name__ == "__main__":
    main()
