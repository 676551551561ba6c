#!/usr/bin/env python
"""Write the published results tables of README.md and docs/results.md from the committed JSON.

    python tools/results_tables.py           # rewrite every table in place
    python tools/results_tables.py --check   # exit 1, naming each table that differs

A table lives between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in a page; its rows
are computed here from the results `rlax-trpo report` reads (`rlax_trpo.report`: the same
records, the same IQM and interval, 2000 bootstrap resamples, seed 0) and the anchors file
beside them. An interval is named as the report names it: "range" below 5 seeds (the 95%
bootstrap interval of an IQM of 4 values is their minimum and maximum), "95% CI" from 5 on.
A cell whose seeds are on `tools/seed_check.py`'s PENDING list (seeds that also ran the
settings it was chosen from) is marked with a dagger, and the line under the table says so.
`tests/test_results_tables.py` fails when a page differs from what this writes.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import seed_check  # noqa: E402

MINATAR = {
    "results": "benchmarks/results/minatar",
    "anchors": "docs/results/minatar_anchors.yaml",
    "games": ["Breakout-MinAtar", "SpaceInvaders-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar"],
    "algorithms": {"ppo": "PPO", "trpo": "TRPO"},
    "approximate": {"PureJaxRL PPO"},  # read off a published curve: "about N"
    "anchor_names": {"gymnax-blines PPO": "gymnax-blines PPO (MLP 256x2)"},
}
# page -> tables it holds (a table may stand on several pages, the same on each)
PAGES = {
    "README.md": ["minatar"],
    "docs/results.md": ["minatar", "minatar_seeds", "craftax", "bundled"],
}


def _cells(spec: dict) -> tuple[dict, dict]:
    """(task -> algorithm -> the report's per-task cell, (algorithm, task) -> its record)."""
    from rlax_trpo.report import aggregate
    from rlax_trpo.report.inputs import load_runs
    from rlax_trpo.report.settings import cells_of

    runs, _ = load_runs([ROOT / spec["results"]])
    cells, _ = cells_of(runs)
    records = {(r["algorithm"], r["task"]): r for r in runs}
    return aggregate.per_task(cells, reps=2000, seed=0), records


def _seeds(record: dict) -> list[int]:
    _, first = seed_check.setting_and_seed(record["command"] or "")
    return list(range(first, first + len(record["scores"]) + record["dropped_seeds"]))


def _span(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def _num(x: float) -> str:
    return f"{x:.1f}"


def _network(record: dict) -> str:
    """` (MLP 256x2)` where the cell's command sets its own hidden sizes."""
    match = re.search(r"hidden_sizes=\[([\d, ]+)\]", record["command"] or "")
    if not match:
        return ""
    sizes = [s.strip() for s in match.group(1).split(",")]
    same = len(set(sizes)) == 1
    return f" (MLP {sizes[0]}x{len(sizes)})" if same else f" (MLP {'x'.join(sizes)})"


def minatar_table(spec: dict = MINATAR) -> str:
    from rlax_trpo.report.tables import interval_header, read_anchors

    per_task, records = _cells(spec)
    anchors = read_anchors(ROOT / spec["anchors"])
    algorithms = spec["algorithms"]
    pending = {stem for table, stem in seed_check.PENDING if table == Path(spec["results"]).name}
    header = ["game"]
    for algo, name in algorithms.items():
        cells = [per_task[g][algo] for g in spec["games"]]
        kind, _ = interval_header(cells)
        counts = {c["seeds"] for c in cells}
        seeds = f"{counts.pop()} seeds" if len(counts) == 1 else "seeds per cell"
        header.append(f"{name} IQM [{kind}], {seeds}")
    header += [spec["anchor_names"].get(label, label) for label in anchors]
    rows, marked = [], False
    for game in spec["games"]:
        row = [game]
        for algo in algorithms:
            cell, record = per_task[game][algo], records[algo, game]
            low, high = cell["iqm_ci95"]
            text = f"{_num(cell['iqm'])} [{_num(low)}, {_num(high)}]{_network(record)}"
            if Path(record["path"]).stem in pending:
                text += " †"
                marked = True
            row.append(text)
        for label, scores in anchors.items():
            value = scores.get(game)
            if value is None:
                row.append("")
            else:
                row.append(f"about {value:g}" if label in spec["approximate"] else f"{value:g}")
        rows.append(row)
    line = lambda cells: "| " + " | ".join(cells) + " |"
    seeds = "; ".join(
        f"{name} "
        + ", ".join(
            sorted({_span(_seeds(records[algo, g])) for g in spec["games"]}, key=lambda s: s)
        )
        for algo, name in algorithms.items()
    )
    lines = [line(header), "|" + "---|" * len(header), *(line(r) for r in rows), ""]
    lines.append(f"Seeds: {seeds}. Generated by `python tools/results_tables.py`")
    lines.append(f"from `{spec['results']}/`.")
    if marked:
        lines.append("† These seeds also ran settings the cell's setting was chosen from.")
    return "\n".join(lines)


def minatar_seeds_table(spec: dict = MINATAR) -> str:
    """Per cell: its seeds, each seed's score, the mean, the greedy evaluation and the wall
    time, from the same files."""
    import json

    _, records = _cells(spec)
    header = ["game", "algorithm", "seeds", "final return per seed", "mean", "greedy eval",
              "wall time", "machine"]  # fmt: skip
    rows = []
    for game in spec["games"]:
        for algo, name in spec["algorithms"].items():
            record = records[algo, game]
            data = json.loads((ROOT / record["path"]).read_text())
            summary = data["summary"]
            per_seed = ", ".join(_num(s) for s in record["scores"])
            rows.append(
                [game, name, _span(_seeds(record)), per_seed,
                 _num(sum(record["scores"]) / len(record["scores"])),
                 _num(summary["eval_return_mean"]), f"{summary['wall_seconds']:.0f} s",
                 f"{data.get('machine', '')}, jax {data.get('jax', '')}, {data.get('date', '')}"]
            )  # fmt: skip
    line = lambda cells: "| " + " | ".join(cells) + " |"
    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in rows)])


CRAFTAX = {
    "results": "benchmarks/results/craftax",
    "anchors": "docs/results/craftax_anchors.yaml",
    "task": "craftax/Craftax-Symbolic-v1",
    "score": "score_percent",
    "rows": {  # algorithm -> (row name, the scoreboard's label beside it)
        "ppo": ("PPO", "scoreboard PPO"),
        "ppo_rnn": ("PPO, recurrent (GRU)", "scoreboard PPO-RNN"),
        "trpo": ("TRPO", None),
        "trpo_rnn": ("TRPO, recurrent (GRU)", None),
    },
}


def craftax_table(spec: dict = CRAFTAX) -> str:
    """Craftax-1M's standard cells: the score (% of the maximum) per row, its IQM and
    interval, each seed's score and the scoreboard's figure."""
    from rlax_trpo.report import aggregate
    from rlax_trpo.report.inputs import load_runs
    from rlax_trpo.report.settings import cells_of
    from rlax_trpo.report.tables import interval_header, read_anchors

    runs, _ = load_runs([ROOT / spec["results"]], score=spec["score"])
    cells, _ = cells_of(runs)
    per_task = aggregate.per_task(cells, reps=2000, seed=0)[spec["task"]]
    records = {r["algorithm"]: r for r in runs}
    anchors = read_anchors(ROOT / spec["anchors"])
    pending = {stem for table, stem in seed_check.PENDING if table == Path(spec["results"]).name}
    kind, _ = interval_header([per_task[a] for a in spec["rows"]])
    header = ["algorithm", f"score, % of max: IQM [{kind}]", "seeds", "per seed",
              "scoreboard (Craftax-1M)"]  # fmt: skip
    rows, marked = [], False
    for algo, (name, label) in spec["rows"].items():
        cell, record = per_task[algo], records[algo]
        low, high = cell["iqm_ci95"]
        text = f"{cell['iqm']:.2f} [{low:.2f}, {high:.2f}]"
        seeds = _span(_seeds(record))
        if Path(record["path"]).stem in pending:
            seeds += " †"
            marked = True
        anchor = anchors.get(label, {}).get(spec["task"]) if label else None
        rows.append([name, text, seeds, ", ".join(f"{v:.2f}" for v in cell["scores"]),
                     "" if anchor is None else f"{anchor:g}"])  # fmt: skip
    line = lambda cells: "| " + " | ".join(cells) + " |"
    lines = [line(header), "|" + "---|" * len(header), *(line(r) for r in rows), ""]
    lines.append("Generated by `python tools/results_tables.py` from "
                 f"`{spec['results']}/`.")  # fmt: skip
    if marked:
        lines += [
            "† Seeds that also ran other settings of the same algorithm (the pilots of the",
            "smaller batches). These cells keep Craftax_Baselines' settings, which no run here",
            "chose; they are to run again on seeds 1000 and up (`tools/seed_check.py`).",
        ]
    return "\n".join(lines)


BUNDLED = "benchmarks/results/bundled_2core"  # benchmarks/bundled_table.py's rows


def _steps(n: int) -> str:
    """199936 -> 200k, 998400 -> 1M: the budget a row's config asks for, as the configs say it."""
    for unit, size in (("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{round(n / size, 1):g}{unit}"
    return str(n)


def _budget(summary: dict) -> str:
    unit = summary.get("unit") or "env steps"
    steps = _steps(summary["total_env_steps"])
    return steps if unit == "env steps" else f"{steps} {unit}"


def _return(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"


def bundled_table(folder: str = BUNDLED) -> str:
    """The bundled configurations at their own budgets, a row per file of
    `benchmarks/bundled_table.py`: final return (mean +- std over seeds), greedy return, wall
    and compile seconds, and the machine, jax version and date the rows ran with."""
    import json

    found = [json.loads(p.read_text()) for p in sorted((ROOT / folder).glob("*.json"))]
    if not found:
        raise ValueError(f"{folder}: no results (python benchmarks/bundled_table.py --results)")
    found.sort(key=lambda r: r["index"])
    header = ["algorithm", "environment", "`--config`", "budget / seed", "seeds", "final",
              "greedy", "wall (compile)"]  # fmt: skip
    line = lambda cells: "| " + " | ".join(cells) + " |"
    lines = [line(header), "|" + "---|" * len(header)]
    for r in found:
        s = r["summary"]
        config = r["command"].split("--config ", 1)[1].split()[0]
        extra = [w for w in r["command"].split() if "=" in w]
        seeds = r["seeds"]
        lines.append(line([
            r["what"], s["env"], f"`{' '.join([config, *extra])}`", _budget(s),
            f"{len(seeds)} ({seeds[0]}-{seeds[-1]})",
            f"{_return(s['final_return_mean'])} +- {_return(s['final_return_std'])}",
            _return(s["eval_return_mean"]),
            f"{s['wall_seconds']:.0f} s ({s['compile_seconds']:.0f} s)",
        ]))  # fmt: skip
    facts = sorted({(r["machine"], r["jax"]) for r in found})
    dates = sorted({r["date"] for r in found})
    ran = "; ".join(f"{m}, jax {j}" for m, j in facts)
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    lines += ["", f"{ran}, {when}. Generated by `python tools/results_tables.py` from `{folder}/`."]
    return "\n".join(lines)


TABLES = {
    "minatar": minatar_table,
    "minatar_seeds": minatar_seeds_table,
    "craftax": craftax_table,
    "bundled": bundled_table,
}


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- table:{name} -->\n)(.*?)(<!-- /table:{name} -->)", re.DOTALL)


def rewritten(page: str, text: str, made: dict[str, str]) -> str:
    """`text` of `page` with each of its tables replaced by what `made` holds."""
    for name in PAGES[page]:
        pattern = _block(name)
        if not pattern.search(text):
            raise ValueError(f"{page}: no <!-- table:{name} --> ... <!-- /table:{name} --> block")
        text = pattern.sub(lambda m, n=name: m.group(1) + made[n] + "\n" + m.group(3), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a diff")
    args = parser.parse_args(argv)
    from rlax_trpo.errors import ConfigError

    try:  # every table made and every page read before any page is written
        made = {name: make() for name, make in TABLES.items()}
        pages = {page: (ROOT / page).read_text() for page in PAGES}
        new_pages = {page: rewritten(page, old, made) for page, old in pages.items()}
    except (ConfigError, ValueError, KeyError, OSError) as err:
        print(f"results_tables: {err}", file=sys.stderr)
        return 2
    differ = []
    for page in PAGES:
        path = ROOT / page
        old, new = pages[page], new_pages[page]
        if new != old:
            differ.append(page)
            if not args.check:  # a whole page or none: written aside, then renamed
                aside = path.with_name(f".{path.name}.tmp")
                aside.write_text(new)
                os.replace(aside, path)
    for page in differ:
        print(f"{page}: {'differs from' if args.check else 'rewritten from'} the results")
    return 1 if differ and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
