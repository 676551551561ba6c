#!/usr/bin/env python
"""Trust regions for a language model, one comparison: clipped GRPO, DPPO-TV, TRPO and NPG on
LoRA parameters, the same model, task, batch and seeds, from the command line on a CPU.

    python benchmarks/lm_trust_regions.py --model runs/lm_trust_regions/tiny_lm \\
        --json benchmarks/results/lm_trust_regions_2core.json

The model is the tiny Qwen2-layout decoder of `rlax-trpo tiny-lm` (made first without
`--model`, as benchmarks/lm_word_problems.py makes it); every run is
`rlax-trpo train --config grpo_tiny_word_problems model_path=MODEL --seed K` with the update's
own settings (`UPDATES`) and the shared ones given on the line (default: `SHARED`). Each run's
metrics.csv gives the curves: held-out greedy accuracy at every evaluation, the KL of every
update on its sampled tokens (`policy/update_kl_mean`, `policy/update_kl_max`, k3 of
KL(pi_old || pi_new) per token), the fraction of updates rejected (TRPO's line search) or of
tokens masked or clipped (DPPO, the ratio clip), and the wall time. Seeds 1000 and up; the
updates' settings are the library's defaults (TRPO/NPG: max_kl 0.01, damping 0.01, 10 CG
iterations; DPPO-TV: thresholds 0.15, verl's example) and were not tuned on any seed.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from _publish import parse_with_overrides, publish
from lm_word_problems import add_model_arguments, make_model
from lm_word_problems import grpo as run_grpo

ROOT = Path(__file__).resolve().parents[1]
# The YAML sets the Adam update's learning rate; a trust-region update reads none, so the
# value goes back to the default (which the configuration takes as "not set").
TRUST_REGION = ["hp.learning_rate=0.001"]
UPDATES = {
    "clip": [],
    "dppo_tv": ["loss_type=dppo_tv"],
    "trpo": ["update=trpo", *TRUST_REGION],
    "npg": ["update=npg", *TRUST_REGION],
}
SHARED = ["num_iterations=100", "eval_every=20", "eval_size=300"]
CURVES = {
    "accuracy": "eval/greedy_accuracy",
    "update_kl_mean": "policy/update_kl_mean",
    "update_kl_max": "policy/update_kl_max",
    "reward": "reward/mean",
    "accepted": "trpo/accepted",
    "dppo_mask_frac": "grpo/dppo_mask_frac",
    "clip_frac_low": "grpo/clip_frac_low",
    "clip_frac_high": "grpo/clip_frac_high",
}


def curves(run: Path) -> dict:
    """The named columns of a run's metrics.csv, as lists of (iteration, value)."""
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for name, column in CURVES.items():
        points = [
            (int(float(r["iteration"])), float(r[column]))
            for r in rows
            if r.get(column) not in (None, "")
        ]
        if points:
            out[name] = points
    return out


def summarise(name: str, rows: list[dict]) -> dict:
    mean = lambda xs: sum(xs) / len(xs)
    kl_max = [max(v for _, v in r["curves"]["update_kl_max"]) for r in rows]
    kl_mean = [mean([v for _, v in r["curves"]["update_kl_mean"]]) for r in rows]
    row = {
        "update": name,
        "final_accuracy_mean": mean([r["final_accuracy"] for r in rows]),
        "initial_accuracy_mean": mean([r["initial_accuracy"] for r in rows]),
        "final_accuracy_per_seed": [r["final_accuracy"] for r in rows],
        "update_kl_mean": mean(kl_mean),
        "update_kl_max_largest": max(kl_max),
        "wall_seconds_mean": mean([r["wall_seconds_process"] for r in rows]),
    }
    for key, column in (("rejected_frac", "accepted"), ("masked_frac", "dppo_mask_frac")):
        if column in rows[0]["curves"]:
            values = [v for r in rows for _, v in r["curves"][column]]
            row[key] = 1.0 - mean(values) if key == "rejected_frac" else mean(values)
    if name == "clip":
        low = [v for r in rows for _, v in r["curves"]["clip_frac_low"]]
        high = [v for r in rows for _, v in r["curves"]["clip_frac_high"]]
        row["clipped_frac"] = mean(low) + mean(high)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "lm_trust_regions")
    add_model_arguments(parser)
    parser.add_argument("--updates", nargs="+", default=list(UPDATES), choices=list(UPDATES))
    parser.add_argument("--json", type=Path)
    args = parse_with_overrides(parser, argv)
    shared = args.overrides or SHARED
    args.out.mkdir(parents=True, exist_ok=True)
    model = args.model or make_model(args.out, args.steps, args.tiny)["folder"]
    results, table = {}, []
    for name in args.updates:
        rows = []
        for seed in args.seeds:
            row = run_grpo(args.out, model, seed, f"{name}_seed_{seed}", UPDATES[name] + shared)
            row["curves"] = curves(args.out / f"{name}_seed_{seed}")
            rows.append(row)
        results[name] = rows
        table.append(summarise(name, rows))
    print("update    accuracy (start -> end)   KL/update mean  max     rejected/masked  wall s")
    for r in table:
        share = r.get("rejected_frac", r.get("masked_frac", r.get("clipped_frac", 0.0)))
        print(
            f"{r['update']:9s} {r['initial_accuracy_mean']:.3f} -> {r['final_accuracy_mean']:.3f}"
            f"          {r['update_kl_mean']:.2e}  {r['update_kl_max_largest']:.2e}  "
            f"{share:.3f}            {r['wall_seconds_mean']:.0f}"
        )
    figures = {
        "what": "clipped GRPO, DPPO-TV, TRPO and NPG with LoRA on word problems, a tiny "
        "Qwen2-layout model made here: held-out greedy accuracy, KL per update (k3 per token, "
        "mean and largest), rejected or masked fractions, wall time",
        "model": model,
        "shared_overrides": shared,
        "updates": UPDATES,
        "seeds": args.seeds,
        "table": table,
        "runs": results,
    }
    publish("lm_trust_regions", figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
