#!/usr/bin/env python
"""Craftax scores two ways, from published results: the return, and the achievements alone.

`score_percent` is an episode's return as % of the maximum (226), the Craftax scoreboard's
unit. The return also counts Craftax's health reward, 0.1 per point of health gained or lost,
so an episode that ends in death from full health (9 points) scores 0.9 below the reward of
its achievements: 0.40 of a point of the 226. `achievement_reward_percent` leaves health out:
each achievement's success rate over the last episodes, weighed by its reward (1, 3, 5 or 8
by tier), out of 226. This prints both per seed, and each row's mean, for result JSONs
written by benchmarks/standard_tables.py (rows without the figure are derived from their
per-achievement success rates, which every Craftax result keeps).

    python benchmarks/craftax_scores.py                     # the 4-seed Craftax-1M rows
    python benchmarks/craftax_scores.py --row NAME FILE [FILE ...] [--row ...]
    python benchmarks/craftax_scores.py --json benchmarks/results/craftax_scores.json

Published: docs/results.md (Craftax-1M), from `benchmarks/results/craftax_scores.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from _publish import publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "benchmarks/results/"
PILOTS = RESULTS + "craftax_1m_pilots_2core/"
TRPO_ROW = PILOTS + "trpo_num_envs_256_steps_32_max_kl_0.02_critic_16_minibatches_lr_1e-3"
# docs/results.md's 4-seed Craftax-1M rows (the populations' sweeps keep the figures of their
# best setting only, so their rows are left out).
ROWS = {
    "PPO, ppo_craftax (1024 x 64), seeds 0-3": [RESULTS + "craftax/ppo_Craftax-Symbolic-v1.json"],
    "PPO, 512 x 32 (ppo_craftax_small_batch), seeds 0-3": [
        PILOTS + "ppo_num_envs_512_steps_32_minibatches_32_layer_norm.json",
        *(f"{RESULTS}craftax_512envs_2core/ppo_seed{i}.json" for i in (1, 2, 3)),
    ],
    "PPO, 512 x 32, entropy 0.005, seeds 30-33": [
        RESULTS + "craftax_1m_h200/ppo_512x32_ent_coef_0.005_seeds_30-33.json"
    ],
    "PPO, 512 x 32, discount 0.98, seeds 30-33": [
        f"{RESULTS}craftax_512envs_2core/ppo_gamma_0.98_seeds_{s}.json" for s in ("30-31", "32-33")
    ],
    "TRPO, trpo_craftax (1024 x 64), seeds 0-3": [
        RESULTS + "craftax/trpo_Craftax-Symbolic-v1.json"
    ],
    "TRPO, 256 x 32 (trpo_craftax_small_batch), seeds 0-3": [
        TRPO_ROW + ".json",
        *(f"{RESULTS}craftax_256envs_2core/trpo_seed{i}.json" for i in (1, 2, 3)),
    ],
    "TRPO, 256 x 32, seeds 30-33": [
        f"{RESULTS}craftax_256envs_2core/trpo_seeds_{s}.json" for s in ("30-31", "32-33")
    ],
    "TRPO, 256 x 32, ReLU, entropy 0.01, seeds 30-33": [
        f"{TRPO_ROW}_relu_ent_coef_0.01_seeds_{s}.json" for s in ("30-31", "32-33")
    ],
    "TRPO, 256 x 32, ReLU, entropy 0.01, discount 0.98, seeds 30-33": [
        f"{TRPO_ROW}_relu_ent_coef_0.01_gamma_0.98_seeds_{s}.json" for s in ("30-31", "32-33")
    ],
}


def scores(path: Path) -> tuple[list[float], list[float]]:
    """Per seed: `score_percent` and `achievement_reward_percent` of a published result."""
    from rlax_trpo.envs.craftax_suite import achievement_names, achievement_reward_percent

    summary = json.loads(path.read_text())["summary"]
    figures = summary.get("final_episode_figures_per_seed") or {}
    if "score_percent" not in figures:
        raise ValueError(f"{path}: not a Craftax result (no score_percent per seed)")
    if not str(summary.get("env", "")).startswith("craftax/Craftax-Symbolic"):
        raise ValueError(f"{path}: not a full Craftax result (env {summary.get('env')!r})")
    score = [float(x) for x in figures["score_percent"]]
    if "achievement_reward_percent" in figures:
        return score, [float(x) for x in figures["achievement_reward_percent"]]
    names = achievement_names(classic=False)
    missing = [n for n in names if f"achievement/{n}" not in figures]
    if missing:
        raise ValueError(f"{path}: no success rate for achievement {missing[0]!r}")
    rates = np.array([figures[f"achievement/{n}"] for n in names], np.float64)  # [names, seeds]
    return score, [float(achievement_reward_percent(rates[:, s], False)) for s in range(len(score))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--row",
        nargs="+",
        action="append",
        metavar=("NAME", "FILE"),
        help="a row's name and its result JSONs (default: the 4-seed rows)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.row and any(len(r) < 2 for r in args.row):
        parser.error("--row takes a name and at least one result JSON")
    rows = {r[0]: r[1:] for r in args.row} if args.row else ROWS
    table = {}
    for name, files in rows.items():
        score, achieved = [], []
        for file in files:
            path = Path(file) if Path(file).is_absolute() else ROOT / file
            if not path.is_file():
                parser.exit(2, f"craftax_scores.py: {file}: no such result JSON\n")
            try:
                s, a = scores(path)
            except (ValueError, KeyError) as err:
                parser.exit(2, f"craftax_scores.py: {err}\n")
            score += s
            achieved += a
        table[name] = {
            "files": files,
            "score_percent_per_seed": [round(x, 4) for x in score],
            "achievement_reward_percent_per_seed": [round(x, 4) for x in achieved],
            "score_percent_mean": round(float(np.mean(score)), 4),
            "achievement_reward_percent_mean": round(float(np.mean(achieved)), 4),
        }
    width = max(len(n) for n in table)
    print(f"{'row':{width}}  score_percent (return)          achievement_reward_percent")
    for name, row in table.items():
        s = " ".join(f"{x:.2f}" for x in row["score_percent_per_seed"])
        a = " ".join(f"{x:.2f}" for x in row["achievement_reward_percent_per_seed"])
        print(
            f"{name:{width}}  {s} = {row['score_percent_mean']:.2f}   "
            f"{a} = {row['achievement_reward_percent_mean']:.2f}"
        )
    publish("craftax_scores", {"unit": "% of the maximum, 226", "rows": table}, args.json)


if __name__ == "__main__":
    main()
