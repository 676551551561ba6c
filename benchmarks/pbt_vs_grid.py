#!/usr/bin/env python
"""Population-based training against a grid of the same size and the same budget.

Each repeat trains, from the same `--seed`, (a) a grid: the explored hyperparameters at
`k` evenly spaced points of their priors each (`k ** fields = --population` settings, one
seed each, `--sweep`), and (b) a PBT run of `--population` members explored every `--ready`
iterations. With `--pbt-init grid` (the default) PBT's members start from the grid's own
points, seed for seed: the two runs are the same until PBT's first step, so the difference
is PBT's exploit and explore alone (PBT "starts like parallel search", Jaderberg et al.
2017; here that search is the grid). With `--pbt-init prior` their starting values
are drawn from the priors instead (`pbt.init: prior`). Its figures, per repeat and as the
IQM over repeats with a 95% bootstrap interval (`rlax_trpo.report.stats`, as `rlax-trpo
report` computes them):

- the grid's best point (the highest final return among its settings) and PBT's best
  member (the highest final return among its members): best of the same number of agents;
  `pbt_wins` counts the repeats in which PBT's is at or above the grid's;
- the cost: each run's env steps per second of training (compile excluded), and PBT's over
  the grid's (PBT must be nearly free).

    python benchmarks/pbt_vs_grid.py --config ppo_minatar env=Breakout-MinAtar \\
        total_env_steps=2000000 --population 8 --repeats 8 \\
        --explore learning_rate=loguniform:1e-4,1e-2 --ready 20 \\
        --json benchmarks/results/pbt_vs_grid_from_grid_breakout_2core.json \\
        --plot docs/pbt/breakout_from_grid.png
    python benchmarks/pbt_vs_grid.py --replot benchmarks/results/pbt_vs_grid_breakout_2core.json \\
        --plot docs/pbt/breakout.png          # the figure again from published figures
    python benchmarks/pbt_vs_grid.py --add-to benchmarks/results/pbt_vs_grid_breakout_2core.json \\
        --repeats 4 --json benchmarks/results/pbt_vs_grid_breakout_2core.json   # 4 more seeds

`--add-to` runs `--repeats` more repeats of a published result with the same settings (its
config, overrides, population, explored priors, ready interval, fraction and PBT's start;
the seeds after its last) and aggregates over all of them; the commands that produced the
earlier rows are kept in `earlier_commands`, each with its date and seeds.

`--plot` draws, per repeat, the grid's best point beside PBT's best member (with each one's
IQM and 95% interval over the repeats), and the schedule of every explored value that PBT's
best agent trained with, over the grid's points.

Published: docs/pbt.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
from _publish import fresh_process_env, parse_with_overrides, publish

from rlax_trpo.pbt import Prior
from rlax_trpo.report import stats


def grid_values(prior: Prior, k: int) -> list[float]:
    """`k` points at the centres of `k` equal bins of the prior (in the logarithm when log)."""
    centres = (np.arange(k) + 0.5) / k
    if prior.log:
        low, high = np.log(prior.low), np.log(prior.high)
        return [float(f"{v:.4g}") for v in np.exp(low + centres * (high - low))]
    return [float(f"{v:.4g}") for v in prior.low + centres * (prior.high - prior.low)]


def train(argv: list[str], out: Path) -> dict:
    """One `train.py` process; its summary.json."""
    command = [sys.executable, str(ROOT / "train.py"), *argv, "--out", str(out), "--no-progress"]
    proc = subprocess.run(command, env=fresh_process_env({}), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"train.py failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads((out / "summary.json").read_text())


def best_point(summary: dict) -> float:
    """The grid's best setting's final return (one seed per setting)."""
    finals = [m["final_return_mean"] for m in summary["members"]]
    return float(np.nanmax(np.asarray(finals, np.float64)))


def best_member(summary: dict) -> float:
    """PBT's best member's final return."""
    finals = [f for m in summary["members"] for f in m["final_return_per_seed"]]
    return float(np.asarray(finals, np.float64)[summary["pbt"]["best_member"]])


def speed(summary: dict) -> float:
    """Env steps per second of training, the whole population's (compile excluded)."""
    return summary["population"] * summary["total_env_steps"] / summary["wall_seconds"]


def aggregate(values: list[float], seed: int = 0) -> dict:
    x = np.asarray(values, np.float64)
    lo, hi = stats.bootstrap_ci(x, stats.iqm, seed=seed)
    return {"iqm": float(stats.iqm(x)), "ci95": [lo, hi], "values": values}


def plot(figures: dict, path: Path) -> None:
    """The figure of `figures` (this script's JSON) at `path`: best returns, then schedules."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, names = figures["repeats"], list(figures["grid"])
    fig, axes = plt.subplots(1, 1 + len(names), figsize=(4.2 * (1 + len(names)), 3.4))
    ax = axes[0]
    x = np.arange(len(rows))
    for i, (key, label, color) in enumerate(
        [("grid_best", "grid's best point", "tab:grey"), ("pbt_best", "PBT's best member", "C0")]
    ):
        ax.scatter(x + (i - 0.5) * 0.15, [r[key] for r in rows], color=color, label=label)
        agg = figures[key]
        ax.axhline(agg["iqm"], color=color, lw=1)
        ax.axhspan(*agg["ci95"], color=color, alpha=0.15, lw=0)
    ax.set(xticks=x, xlabel="repeat (seed)", ylabel="final return (best of the population)")
    ax.set_title(f"{len(figures['grid'][names[0]]) ** len(names)} agents each; IQM, 95% CI")
    ax.legend(fontsize=8)
    for ax, name in zip(axes[1:], names, strict=True):
        for i, value in enumerate(figures["grid"][name]):
            ax.axhline(value, color="tab:grey", lw=0.6, ls=":", label="grid" if i == 0 else None)
        for r in rows:
            steps = r["pbt_schedule"][name]
            its, values = [s[0] for s in steps], [s[1] for s in steps]
            ax.step(its, values, where="post", lw=1.2, label=f"repeat {r['seed']}")
        values = [v for r in rows for _, v in r["pbt_schedule"][name]] + figures["grid"][name]
        if max(values) > 10 * min(values) > 0:
            ax.set_yscale("log")
        ax.set(xlabel="iteration (each value holds after its last change)", ylabel=name)
        ax.set_title(f"PBT's best agent's {name}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def continue_from(earlier: dict, args, parser, words_given: list[str]) -> argparse.Namespace:
    """`args` with the settings of the benchmark in `earlier` (a published JSON); a setting
    given on the line (`words_given`, even at its default) that differs from it is an error:
    the repeats would not be alike."""
    if earlier.get("benchmark") != "pbt_vs_grid":
        parser.error(f"--add-to {args.add_to}: not a pbt_vs_grid result")
    words = dict(w.partition("=")[::2] for w in earlier["pbt"])
    settings = {
        "config": earlier["config"],
        "population": earlier["population"],
        "ready": int(words["pbt.ready"]),
        "fraction": float(words["pbt.fraction"]),
        "pbt_init": earlier.get("pbt_init", "prior" if "pbt.init" in words else "grid"),
    }
    flags = {w.partition("=")[0] for w in words_given if w.startswith("--")}
    for name, value in settings.items():
        given = getattr(args, name)
        if f"--{name.replace('_', '-')}" in flags and given != value:
            parser.error(
                f"--add-to {args.add_to}: its --{name.replace('_', '-')} is {value}, not {given}"
            )
        setattr(args, name, value)
    explore = [
        f"{k.removeprefix('pbt.explore.')}={v}"
        for k, v in words.items()
        if k.startswith("pbt.explore.")
    ]
    if args.explore and sorted(args.explore) != sorted(explore):
        parser.error(f"--add-to {args.add_to}: its --explore is {explore}")
    if args.overrides and args.overrides != earlier["overrides"]:
        parser.error(f"--add-to {args.add_to}: its overrides are {earlier['overrides']}")
    args.explore, args.overrides = explore, list(earlier["overrides"])
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="ppo_cartpole", help="a bundled name or YAML file")
    parser.add_argument("--population", type=int, default=8, help="grid settings = PBT members")
    parser.add_argument("--repeats", type=int, default=4, help="independent repeats (seeds)")
    parser.add_argument(
        "--explore",
        action="append",
        metavar="NAME=PRIOR",
        help="an explored hyperparameter and its prior, repeatable "
        "(default: learning_rate=loguniform:1e-5,1e-2)",
    )
    parser.add_argument("--ready", type=int, default=10, help="PBT: iterations between steps")
    parser.add_argument("--fraction", type=float, default=0.25, help="PBT: truncation fraction")
    parser.add_argument(
        "--pbt-init",
        choices=("grid", "prior"),
        default="grid",
        help="PBT's starting values: the grid's points (default) or draws from the priors",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--plot", type=Path, help="draw the figure here (PNG)")
    parser.add_argument("--replot", type=Path, help="no training: draw --plot from this JSON")
    parser.add_argument(
        "--add-to", type=Path, help="run more repeats of this published JSON's benchmark"
    )
    args = parse_with_overrides(parser, argv)
    earlier: dict | None = None
    if args.add_to is not None:
        earlier = json.loads(args.add_to.read_text())
        args = continue_from(earlier, args, parser, sys.argv[1:] if argv is None else argv)
    if args.replot is not None:
        if args.plot is None:
            parser.error("--replot needs --plot (where to draw)")
        plot(json.loads(args.replot.read_text()), args.plot)
        return 0
    explore = {}
    for item in args.explore or ["learning_rate=loguniform:1e-5,1e-2"]:
        name, _, text = item.partition("=")
        explore[name.removeprefix("hp.")] = (text, Prior.parse(text))
    k = round(args.population ** (1 / len(explore)))
    if k ** len(explore) != args.population or k < 2:
        parser.error(f"--population {args.population} is not k ** {len(explore)} with k >= 2")
    grid = {name: grid_values(prior, k) for name, (_, prior) in explore.items()}
    pbt = [f"pbt.explore.{n}={text}" for n, (text, _) in explore.items()]
    pbt += ["pbt.init=prior"] if args.pbt_init == "prior" else []
    pbt += [f"pbt.ready={args.ready}", f"pbt.fraction={args.fraction}"]
    sweeps = [w for n, v in grid.items() for w in ("--sweep", f"hp.{n}=" + ",".join(map(str, v)))]
    # from the grid: one seed of each grid point; from the prior: `population` seeds, each drawing
    members = (
        ["--seeds", "1", *sweeps] if args.pbt_init == "grid" else ["--seeds", str(args.population)]
    )
    base = ["--config", args.config, *args.overrides]
    rows = list(earlier["repeats"]) if earlier else []
    first = 1 + max((r["seed"] for r in rows), default=-1)
    with tempfile.TemporaryDirectory(prefix="pbt-vs-grid-") as tmp:
        for r in range(first, first + args.repeats):
            seed = ["--seed", str(r)]
            g = train([*base, *seed, "--seeds", "1", *sweeps], Path(tmp) / f"grid{r}")
            p = train([*base, *seed, *members, *pbt], Path(tmp) / f"pbt{r}")
            row = {
                "seed": r,
                "grid_best": best_point(g),
                "pbt_best": best_member(p),
                "grid_env_steps_per_s": speed(g),
                "pbt_env_steps_per_s": speed(p),
                "grid_compile_s": g["compile_seconds"],
                "pbt_compile_s": p["compile_seconds"],
                "pbt_schedule": p["pbt"]["schedule"],
            }
            rows.append(row)
            print(
                f"repeat {r}: grid best {row['grid_best']:.2f}, PBT best {row['pbt_best']:.2f}; "
                f"env steps/s grid {row['grid_env_steps_per_s']:,.0f}, "
                f"PBT {row['pbt_env_steps_per_s']:,.0f}",
                flush=True,
            )
    cost = [r["grid_env_steps_per_s"] / r["pbt_env_steps_per_s"] for r in rows]
    figures = {
        "config": args.config,
        "overrides": args.overrides,
        "population": args.population,
        "grid": grid,
        "pbt": pbt,
        "pbt_init": args.pbt_init,
        "grid_best": aggregate([r["grid_best"] for r in rows]),
        "pbt_best": aggregate([r["pbt_best"] for r in rows]),
        "pbt_cost_per_env_step_over_grid": aggregate(cost),
        "pbt_wins": sum(r["pbt_best"] >= r["grid_best"] for r in rows),
        "repeats": rows,
    }
    if earlier is not None:
        before = earlier.get("earlier_commands", [])
        counted = {seed for entry in before for seed in entry["seeds"]}
        seeds = [r["seed"] for r in earlier["repeats"] if r["seed"] not in counted]
        figures["earlier_commands"] = [
            *before,
            {"command": earlier["command"], "date": earlier["date"], "seeds": seeds},
        ]
    publish("pbt_vs_grid", figures, args.json)
    if args.plot is not None:
        plot(figures, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
