#!/usr/bin/env python
"""The standard tables at their published budgets: MinAtar at 1e7 env steps, Craftax-1M.

Each (algorithm, task) cell is one `train.py` run of `--seeds` vmapped seeds, written in
chunks (`--chunk-iterations`) so that a killed run continues where it stopped: run this
script again and every cell that is finished is skipped, every cell that was cut off is
resumed (`--resume`), the rest start. A finished cell's `summary.json` is copied, with the
command, date, machine and jax version, to `--results` (default
`benchmarks/results/<table>/<algorithm>_<task>.json`); its run folder (checkpoints, curves)
stays under `--runs`. `rlax-trpo report` turns those files into the tables and figures.

    python benchmarks/standard_tables.py minatar                      # 4 games x PPO, TRPO
    python benchmarks/standard_tables.py minatar --algos ppo --games Breakout-MinAtar
    python benchmarks/standard_tables.py craftax --seeds 4
    python benchmarks/standard_tables.py jumanji        # beside benchmarks/jumanji_a2c.py
    python benchmarks/standard_tables.py minatar --budget 65536 --runs /tmp/t --results /tmp/r
    python benchmarks/standard_tables.py minatar --algos trpo --budget 2000000 --seeds 2 \
        --sweep hp.max_kl=0.01,0.03 --sweep hp.ent_coef=0,0.01 --results DIR   # tune a row

With `--sweep` a cell is one compiled population of settings x seeds (`train.py --sweep`), the
way a user tunes with this library; its summary (every setting's IQM and interval, and the
best) is published like a cell's, to `--results` (default `benchmarks/results/<table>_sweeps`).

Published anchors (docs/results.md): gymnax-blines' PPO at 1e7 (Breakout 28, SpaceInvaders
131, Asterix 15, Freeway 58), PureJaxRL's Breakout about 40; the Craftax scoreboard's
Craftax-1M PPO 2.2% and PPO-RNN 2.3% of the maximum score.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _publish import machine

ROOT = Path(__file__).resolve().parents[1]

# table -> (config per algorithm, tasks)
TABLES = {
    "minatar": (
        {"ppo": "configs/ppo_minatar.yaml", "trpo": "configs/trpo_minatar.yaml"},
        ["Breakout-MinAtar", "SpaceInvaders-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar"],
    ),
    "craftax": (
        {
            "ppo": "configs/ppo_craftax.yaml",
            "trpo": "configs/trpo_craftax.yaml",
            "ppo_rnn": "configs/ppo_memory_craftax.yaml",
            "trpo_rnn": "configs/trpo_memory_craftax.yaml",
        },
        ["craftax/Craftax-Symbolic-v1"],
    ),
    # Beside jumanji/training's own A2C (benchmarks/jumanji_a2c.py), each at its budget below.
    "jumanji": (
        {
            "ppo": "studies/jumanji_a2c/ppo.yaml",
            "trpo": "studies/jumanji_a2c/trpo.yaml",
            "ppo_unmasked": "studies/jumanji_a2c/ppo.yaml",
        },
        ["jumanji/Minesweeper-v0", "jumanji/Knapsack-v1", "jumanji/Snake-v1"],
    ),
}


# Per-cell settings on top of the algorithm's config (a table may tune per task, as
# gymnax-blines does): PPO on Asterix takes gymnax-blines' MLP width (two layers of 256) and
# gamma 0.999 and learning rate 2.5e-3, the best IQM of an 8-setting sweep of learning rate
# (2.5e-4 to 2.5e-3) x gamma (0.99, 0.999) at that width, seeds 0-3. TRPO takes, per game,
# the setting of its 2M-step sweeps (seeds 0-1) that did best when re-run at 1e7 steps on
# seeds 100-103. A table's cells then run on seeds that chose nothing: 1000 and up, the
# default `--seed` (tools/seed_check.py checks it over benchmarks/results/).
TRPO_LOG_BARRIER = [  # a wider region, the log barrier's pull to uniform (falling to 0 over
    "hp.max_kl=0.1",  # the run), a faster critic
    "hp.ent_coef=0.03",
    "hp.value_learning_rate=0.01",
    "entropy_bonus=log_barrier",
    "anneal_ent_coef=true",
]
CELL_OVERRIDES = {
    ("minatar", "ppo", "Asterix-MinAtar"): [
        "hidden_sizes=[256,256]",
        "hp.learning_rate=2.5e-3",
        "hp.gamma=0.999",
    ],
    ("minatar", "trpo", "Breakout-MinAtar"): TRPO_LOG_BARRIER,
    ("minatar", "trpo", "SpaceInvaders-MinAtar"): ["hp.max_kl=0.03"],
    ("minatar", "trpo", "Asterix-MinAtar"): TRPO_LOG_BARRIER,
    ("minatar", "trpo", "Freeway-MinAtar"): ["hp.max_kl=0.03", "hp.ent_coef=0.03"],
}


# Jumanji: per task, the discount of jumanji/training's config and the env steps of the A2C
# epochs run beside it (benchmarks/jumanji_a2c.py --epochs: Minesweeper 4 of 100 epochs of
# 256,000 steps, Knapsack 10 of 100 of 64,000, Snake 1 of 200 of 1,280,000).
JUMANJI_TASKS = {
    "jumanji/Minesweeper-v0": ["hp.gamma=0.99", "total_env_steps=1024000"],
    "jumanji/Knapsack-v1": ["hp.gamma=1.0", "total_env_steps=640000"],
    "jumanji/Snake-v1": ["hp.gamma=0.997", "total_env_steps=1280000"],
}
for _task, _settings in JUMANJI_TASKS.items():
    CELL_OVERRIDES[("jumanji", "ppo", _task)] = _settings
    CELL_OVERRIDES[("jumanji", "trpo", _task)] = _settings
    CELL_OVERRIDES[("jumanji", "ppo_unmasked", _task)] = [*_settings, "mask_actions=false"]


def cell_name(algo: str, task: str) -> str:
    return f"{algo}_{task.split('/')[-1]}"


def run_cell(args: argparse.Namespace, config: str, algo: str, task: str) -> str:
    """Train (or resume) one cell and publish its summary; returns what happened."""
    name = cell_name(algo, task)
    result = args.results / f"{name}.json"
    run_dir = args.runs / name
    if result.exists() and not args.budget:
        return "done before"
    overrides = [f"env={task}", *CELL_OVERRIDES.get((args.table, algo, task), []),
                 *args.overrides]  # fmt: skip
    for sweep in args.sweep:
        overrides += ["--sweep", sweep]
    if args.budget:
        overrides.append(f"total_env_steps={args.budget}")
    cmd = [sys.executable, str(ROOT / "train.py"), "--config", str(ROOT / config),
           "--seeds", str(args.seeds), "--seed", str(args.seed), "--no-progress",
           *overrides]  # fmt: skip
    if (run_dir / "config.yaml").exists():
        cmd += ["--resume", str(run_dir)]
    else:
        cmd += ["--out", str(run_dir)]
    if args.chunk_iterations:
        cmd += ["--chunk-iterations", str(args.chunk_iterations)]
    start = time.time()
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode != 0 or not (run_dir / "summary.json").exists():
        return f"failed (exit {proc.returncode}); run again to resume {run_dir}"
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("iterations_done") != summary.get("num_iterations"):
        return f"unfinished ({summary.get('iterations_done')} iterations); run again"
    if args.sweep:  # the settings' figures, and the best
        best = summary["best"]
        outcome = f"best {best['hp']}: IQM {best['final_return_iqm']:.1f}"
    else:
        outcome = f"{summary['final_return_per_seed']}"
    import jax

    accelerator = f", {summary['device']}" if summary.get("platform") not in (None, "cpu") else ""
    published = {
        "benchmark": f"standard_tables/{args.table}",
        "date": datetime.date.today().isoformat(),
        "machine": machine() + accelerator,
        "jax": jax.__version__,
        "command": " ".join(["python", "train.py", *cmd[2:]]).replace(str(ROOT) + "/", ""),
        "task": task,
        "algorithm": algo,  # the table's row: ppo_rnn is PPO with a recurrent policy
        "score": "final_return_per_seed: mean training-episode return over the last 10% of "
        "iterations, one per seed",
        "summary": summary,
        # the resolved config, by which `rlax-trpo report` pools runs of the same settings
        "config": yaml.safe_load((run_dir / "config.yaml").read_text()),
    }
    args.results.mkdir(parents=True, exist_ok=True)
    tmp = result.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(published, indent=1) + "\n")
    os.replace(tmp, result)
    return f"finished in {time.time() - start:.0f} s: {outcome}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("table", choices=sorted(TABLES))
    p.add_argument("--algos", nargs="+", help="default: every algorithm of the table")
    p.add_argument("--games", nargs="+", help="tasks (default: every task of the table)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--seed", type=int, default=1000, help="base PRNG seed of every cell's "
                   "run (default 1000: confirmation seeds, which no tuning run takes)")  # fmt: skip
    p.add_argument("--chunk-iterations", type=int, default=100)
    p.add_argument("--budget", type=int, help="env steps per seed instead of the config's "
                   "(a smoke run: results are rewritten every time)")  # fmt: skip
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "standard_tables")
    p.add_argument("--results", type=Path, help="default: benchmarks/results/<table>")
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="hp.NAME=V1,V2",
        help="tune: each cell a population of these settings (repeat for a grid)",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_intermixed_args(argv)  # overrides may follow the options
    configs, tasks = TABLES[args.table]
    table = f"{args.table}_sweeps" if args.sweep else args.table
    args.results = args.results or ROOT / "benchmarks" / "results" / table
    args.runs = args.runs / table
    unknown = [a for a in args.algos or [] if a not in configs]
    if unknown:
        p.error(f"--algos: {unknown[0]} is not in the {args.table} table ({', '.join(configs)})")
    failed = 0
    for algo in args.algos or list(configs):
        for task in args.games or tasks:
            outcome = run_cell(args, configs[algo], algo, task)
            failed += outcome.startswith(("failed", "unfinished"))
            print(f"{cell_name(algo, task)}: {outcome}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
