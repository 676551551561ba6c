"""The bundled configurations at their own budgets: each row of docs/results.md's table of them
trained in a fresh `train.py` process on seeds set aside for it (1000 and up), its
`summary.json` figures written as one JSON file per row.

    python benchmarks/bundled_table.py --results benchmarks/results/bundled_2core
    python benchmarks/bundled_table.py --only ppo_cartpole trpo_cartpole --results DIR
    python tools/results_tables.py        # docs/results.md's table from those files

Each row is `python train.py --config NAME --seeds N --seed 1000 --out DIR --no-progress
[overrides]`, run one after another (each uses every core). A row's file holds the command,
the config's final return (mean and standard deviation over the seeds of the last 10% of
iterations), the greedy evaluation, the wall and compile seconds and the env steps. The
bundled settings were chosen on seeds below 1000 (`tools/seed_check.py` checks that no other
committed run of the same task and algorithm used these seeds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _publish import publish, timed_train

ROOT = Path(__file__).resolve().parents[1]
SEED = 1000  # the published rows' seeds: 1000 and up, which no tuning run used

# (row name, config, seeds, overrides, what the row is); the table's order
ROWS = [
    ("ppo_cartpole", "ppo_cartpole", 8, [], "PPO (clip), the default"),
    ("ppo_cartpole_purejaxrl", "ppo_cartpole_purejaxrl", 4, [], "PPO (clip)"),
    ("ppo_kl_adaptive_cartpole", "ppo_kl_adaptive_cartpole", 4, [], "PPO (adaptive KL)"),
    ("ppo_pendulum", "ppo_pendulum", 4, [], "PPO (clip)"),
    ("trpo_cartpole", "trpo_cartpole", 4, [], "TRPO"),
    ("trpo_pendulum", "trpo_pendulum", 4, [], "TRPO"),
    ("npg_cartpole", "npg_cartpole", 4, [], "NPG"),
    ("vpg_cartpole", "vpg_cartpole", 4, [], "VPG"),
    ("grpo_cartpole", "grpo_cartpole", 4, [], "GRPO (per-step returns)"),
    ("grpo_qa_bandit", "grpo_qa_bandit", 4, [], "GRPO, mean reward"),
    ("ppo_memory_cartpole", "ppo_memory_cartpole", 4, [], "PPO + GRU"),
    ("ppo_memory_cartpole_feedforward", "ppo_memory_cartpole", 4, ["memory=none"],
     "PPO, feed-forward"),
    ("trpo_memory_cartpole", "trpo_memory_cartpole", 4, [], "TRPO + GRU"),
    ("trpo_memory_cartpole_feedforward", "trpo_memory_cartpole", 4, ["memory=none"],
     "TRPO, feed-forward"),
    ("ppo_memory_chain", "ppo_memory_chain", 4, [], "PPO + GRU"),
    # memory_size back to its default: the config's 64 is read only with a memory network, and
    # a value nothing reads is refused (one line, exit 2)
    ("ppo_memory_chain_feedforward", "ppo_memory_chain", 4, ["memory=none", "memory_size=128"],
     "PPO, feed-forward"),
    # Jumanji: the action mask enforced (the default), and given only as observations
    ("ppo_jumanji_snake", "ppo_jumanji_snake", 2, [], "PPO, masked"),
    ("ppo_jumanji_snake_unmasked", "ppo_jumanji_snake", 2, ["mask_actions=false"],
     "PPO, mask unenforced"),
    ("ppo_jumanji_maze", "ppo_jumanji_maze", 2, [], "PPO, masked"),
    ("ppo_jumanji_maze_unmasked", "ppo_jumanji_maze", 2, ["mask_actions=false"],
     "PPO, mask unenforced"),
    ("ppo_jumanji_game2048", "ppo_jumanji_game2048", 2, [], "PPO, masked"),
    ("ppo_jumanji_game2048_unmasked", "ppo_jumanji_game2048", 2, ["mask_actions=false"],
     "PPO, mask unenforced"),
]  # fmt: skip


def run_row(name: str, config: str, seeds: int, overrides: list[str], extra: list[str]) -> dict:
    """One row trained in a fresh process; its figures (the command as a user would type it)."""
    args = ["--config", config, "--seeds", str(seeds), "--seed", str(SEED), *overrides]
    wall, summary = timed_train(sys.executable, [*args, *extra], ROOT, f"{name}: train.py")
    keys = ("algorithm", "env", "num_seeds", "total_env_steps", "final_return_mean",
            "final_return_std", "final_return_per_seed", "eval_return_mean", "unit",
            "wall_seconds", "compile_seconds", "env_steps_per_second", "num_devices")  # fmt: skip
    return {
        "row": name,
        # the run as a user types it (what tools/seed_check.py reads); `made_by`: this script
        "command": "python train.py " + " ".join([*args, *extra]),
        "made_by": "python " + " ".join(sys.argv),
        "seeds": list(range(SEED, SEED + seeds)),
        "process_seconds": wall,
        "summary": {k: summary.get(k) for k in keys},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help="write one JSON file per row here")
    parser.add_argument("--only", nargs="+", metavar="ROW", help="these rows only")
    parser.add_argument(
        "--extra", nargs=argparse.REMAINDER, default=[], help="more words for every train.py"
    )
    args = parser.parse_args(argv)
    known = [row[0] for row in ROWS]
    for name in args.only or ():
        if name not in known:
            parser.error(f"--only {name}: no such row ({', '.join(known)})")
    for index, (name, config, seeds, overrides, what) in enumerate(ROWS):
        if args.only and name not in args.only:
            continue
        figures = run_row(name, config, seeds, overrides, args.extra)
        figures.update(index=index, what=what)
        path = args.results / f"{name}.json" if args.results else None
        publish("bundled_table", figures, path)


if __name__ == "__main__":
    main()
