"""`rlax-trpo report`'s tables, as markdown: what it prints and what report.md holds.

The per-task table has a row per task and three columns per algorithm (IQM, mean, seeds) while
there are few algorithms (`WIDE_UP_TO`), as the standard tables are read. Beyond that, as when
the inputs ran many settings and each is a row of its own, it has a row per task and
algorithm, so that the table grows down the page and not across it. `read_anchors` reads
the published reference scores a table shows beside its rows. Host-side only: no JAX.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlax_trpo.report.inputs import ReportError

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


def _figures(cell: dict[str, Any] | None, label: bool) -> list[Any]:
    """A cell's IQM, mean (each with its interval; `label`: the interval's kind named in
    the cell, for a column that holds both kinds) and seeds."""
    if cell is None:
        return ["-", "-", "-"]
    kind = f" {cell['interval']}" if label else ""
    # Below 5 seeds the cell shows the seeds' range beside both estimates: the IQM's
    # bootstrap interval is that range, the mean's (narrower) would be no confidence interval.
    spread = [min(cell["scores"]), max(cell["scores"])]
    ranged = cell["interval"] == "range"
    return [
        interval(cell["iqm"], spread if ranged else cell["iqm_ci95"]) + kind,
        interval(cell["mean"], spread if ranged else cell["mean_ci95"]) + kind,
        cell["seeds"],
    ]


def interval_header(cells: list[dict[str, Any]]) -> tuple[str, bool]:
    """The columns' name for the intervals of `cells` (`95% CI` or `range` when all are of
    one kind) and whether each cell must name its own (both kinds in one column)."""
    kinds = {c["interval"] for c in cells}
    return (kinds.pop(), False) if len(kinds) == 1 else ("95% CI or range", True)


def per_task_table(report: dict[str, Any], anchors: dict[str, dict[str, float]]) -> str:
    """The final scores per task and algorithm (IQM and mean with their 95% bootstrap
    intervals, named "95% CI" from 5 seeds on and "range" below; seeds), each anchor label's
    number for the task, and the few-seeds note of any cell with fewer than 5 seeds: a row per
    task up to `WIDE_UP_TO` algorithms, else a row per task and algorithm that ran it."""
    algorithms, per_task = report["algorithms"], report["per_task"]
    notes = any(c["note"] for cells in per_task.values() for c in cells.values())
    published = lambda task: [num(a[task]) if task in a else "" for a in anchors.values()]
    rows = []
    if len(algorithms) > WIDE_UP_TO:
        name, label = interval_header([c for cells in per_task.values() for c in cells.values()])
        header = ["task", "algorithm", f"IQM [{name}]", f"mean [{name}]", "seeds", *anchors]
        for task in report["tasks"]:
            for algo in algorithms:
                cell = per_task[task].get(algo)
                if cell is None:  # a long table leaves out what did not run
                    continue
                note = [cell["note"] or ""] if notes else []
                rows.append([task, algo, *_figures(cell, label), *published(task), *note])
    else:
        header, labels = ["task"], {}
        for algo in algorithms:
            ran = [per_task[t][algo] for t in report["tasks"] if algo in per_task[t]]
            name, labels[algo] = interval_header(ran)
            header += [f"{algo} IQM [{name}]", f"{algo} mean [{name}]", f"{algo} seeds"]
        header += list(anchors)
        for task in report["tasks"]:
            row, said = [task], []
            for algo in algorithms:
                cell = per_task[task].get(algo)
                row += _figures(cell, labels[algo])
                if cell is not None and cell["note"]:
                    said.append(f"{algo}: {cell['note']}")
            rows.append([*row, *published(task), *(["; ".join(said)] if notes else [])])
    return "\n".join(table(header + (["note"] if notes else []), rows))


def read_anchors(path: Path) -> dict[str, dict[str, float]]:
    """Published reference scores from a YAML mapping `label: {task: score}`."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) else "not text"
        raise ReportError(f"--anchors: cannot read {path} ({why})") from None
    except yaml.YAMLError as err:
        why = " ".join(str(err).split())
        raise ReportError(f"--anchors: {path} is not valid YAML ({why})") from None
    shape = "a mapping label: {task: score}, e.g. 'gymnax-blines PPO: {Breakout-MinAtar: 28}'"
    if not isinstance(data, dict) or not data:
        raise ReportError(f"--anchors: {path} must hold {shape}")
    anchors = {}
    for label, scores in data.items():
        if not isinstance(scores, dict):
            raise ReportError(f"--anchors: {label!r} in {path} must map tasks to scores")
        for task, value in scores.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not math.isfinite(value):
                raise ReportError(f"--anchors: {label!r} on {task!r}: {value!r} is not a number")
        anchors[str(label)] = {str(t): float(v) for t, v in scores.items()}
    return anchors
