"""`rlax-trpo report`'s tables, as markdown: what it prints and what report.md holds.

The per-task table has a row per task and three columns per algorithm (IQM, mean, seeds) while
there are few algorithms (`WIDE_UP_TO`), as the standard tables are read. Beyond that, as when
the inputs ran many settings and each is a row of its own, it has a row per task and
algorithm, so that the table grows down the page and not across it. Host-side only: no JAX.
"""

from __future__ import annotations

from typing import Any

WIDE_UP_TO = 4  # algorithms: up to this many, a row per task; beyond, a row per task and algorithm


def num(x: float) -> str:
    """A score for a table: 4 significant figures, whole numbers from 10,000 on."""
    return f"{x:.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def interval(value: float, ci95: list[float]) -> str:
    return f"{num(value)} [{num(ci95[0])}, {num(ci95[1])}]"


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table; `|` in a cell is escaped."""
    line = lambda cells: "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return [line(header), line(["---"] * len(header)), *(line(r) for r in rows)]


def _figures(cell: dict[str, Any] | None) -> list[Any]:
    if cell is None:
        return ["-", "-", 0]
    return [
        interval(cell["iqm"], cell["iqm_ci95"]),
        interval(cell["mean"], cell["mean_ci95"]),
        cell["seeds"],
    ]


def per_task_table(report: dict[str, Any], anchors: dict[str, dict[str, float]]) -> str:
    """The final scores per task and algorithm (IQM and mean with 95% intervals, seeds), each
    anchor label's number for the task, and the few-seeds note of any cell with fewer than 4
    seeds: a row per task up to `WIDE_UP_TO` algorithms, else a row per task and algorithm."""
    algorithms, per_task = report["algorithms"], report["per_task"]
    notes = any(c["note"] for cells in per_task.values() for c in cells.values())
    published = lambda task: [num(a[task]) if task in a else "" for a in anchors.values()]
    rows = []
    if len(algorithms) > WIDE_UP_TO:
        header = ["task", "algorithm", "IQM [95% CI]", "mean [95% CI]", "seeds", *anchors]
        for task in report["tasks"]:
            for algo in algorithms:
                cell = per_task[task].get(algo)
                note = [(cell["note"] if cell else "") or ""] if notes else []
                rows.append([task, algo, *_figures(cell), *published(task), *note])
    else:
        header = ["task"]
        for algo in algorithms:
            header += [f"{algo} IQM [95% CI]", f"{algo} mean [95% CI]", f"{algo} seeds"]
        header += list(anchors)
        for task in report["tasks"]:
            row, said = [task], []
            for algo in algorithms:
                cell = per_task[task].get(algo)
                row += _figures(cell)
                if cell is not None and cell["note"]:
                    said.append(f"{algo}: {cell['note']}")
            rows.append([*row, *published(task), *(["; ".join(said)] if notes else [])])
    return "\n".join(table(header + (["note"] if notes else []), rows))
