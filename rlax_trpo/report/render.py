"""`rlax-trpo report`'s files from `rlax_trpo.report.aggregate.build_report`'s numbers: report.md,
report.json and the figures (per_task.png; aggregate.png, performance_profile.png and
probability_of_improvement.png where they apply, drawn by rliable's `plot_utils`).

Every file is written under a temporary name and renamed once all are drawn, so a crash leaves
no file half written. The figures draw on Agg; the caller's matplotlib backend is left as it
was. Host-side only: no JAX.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rlax_trpo.report.aggregate import METRICS, MIN_SEEDS_FOR_CI, MIN_SEEDS_FOR_INTERVAL
from rlax_trpo.report.tables import interval as _interval
from rlax_trpo.report.tables import num, per_task_table
from rlax_trpo.report.tables import table as _table

# What a cell of per_task.png shows by its seeds (`cell_kind`): its marker, its legend.
CELL_KINDS = {
    "iqm": ("o", f"IQM, 95% bootstrap CI ({MIN_SEEDS_FOR_CI}+ seeds)"),
    "iqm_range": ("^", f"IQM, range min to max ({MIN_SEEDS_FOR_INTERVAL} seeds)"),
    "range": ("s", f"mean, range min to max (2-{MIN_SEEDS_FOR_INTERVAL - 1} seeds)"),
    "value": ("D", "the value of its single seed"),
}

FIGURES = {
    "per_task.png": "the final score per task: the IQM with its 95% CI from 5 seeds on, with "
    "the range with 4, else the mean with the range, or one seed's value",
    "aggregate.png": "aggregate metrics of min-max normalised scores, with 95% intervals",
    "performance_profile.png": "performance profiles of min-max normalised scores",
    "probability_of_improvement.png": "probability of improvement, with 95% intervals",
}


def _link(figure: str) -> str:
    return f"![{FIGURES[figure]}]({figure})"


def _inputs_section(report: dict[str, Any]) -> list[str]:
    header = ["algorithm", "task", "seeds", "env steps per seed", "input", "command", "date"]
    rows = [
        [
            r["algorithm"],
            r["task"],
            len(r["scores"]),
            f"{r['total_env_steps']:,}" if isinstance(r["total_env_steps"], int) else "",
            f"`{r['path']}`",
            f"`{r['command']}`" if r["command"] else "",
            r["date"] or "",
        ]
        for r in report["inputs"]
    ]
    return ["## Inputs", "", *_table(header, rows), ""]


def _across_section(report: dict[str, Any], drawn: set[str]) -> list[str]:
    lines = ["## Across tasks: min-max normalised scores", ""]
    across = report["across_tasks"]
    if across is None:
        return [*lines, f"Skipped: {report['skipped']['across_tasks']}.", ""]
    lines.append("Normalised score = (score - low) / (high - low), per task:")
    for task, r in across["ranges"].items():
        lines.append(f"- {task}: low {num(r['low'])}, high {num(r['high'])} ({r['from']})")
    seeds = ", ".join(f"{a} {k}" for a, k in across["seeds_per_task"].items())
    lines += ["", f"Seeds per task: {seeds}. Intervals: {report['settings']['interval']}.", ""]
    rows = [
        [a, *(_interval(m[name]["value"], m[name]["ci95"]) for name in METRICS)]
        for a, m in across["metrics"].items()
    ]
    lines += _table(["algorithm", *(f"{name} [95% CI]" for name in METRICS)], rows)
    for name in ("aggregate.png", "performance_profile.png"):
        if name in drawn:
            lines += ["", _link(name)]
    return [*lines, ""]


def _improvement_section(report: dict[str, Any], drawn: set[str]) -> list[str]:
    lines = ["## Probability of improvement", ""]
    pairs = report["probability_of_improvement"]
    if pairs is None:
        return [*lines, f"Skipped: {report['skipped']['probability_of_improvement']}.", ""]
    lines += [
        "P(X > Y): the probability that a seed of X scores higher than a seed of Y on a "
        "task (ties count half), averaged over the tasks that all ran.",
        "",
    ]
    rows = [[p["x"], p["y"], _interval(p["probability"], p["ci95"])] for p in pairs]
    lines += _table(["X", "Y", "P(X > Y) [95% CI]"], rows)
    if "probability_of_improvement.png" in drawn:
        lines += ["", _link("probability_of_improvement.png")]
    return [*lines, ""]


def markdown(report: dict[str, Any], anchors: dict, title: str, drawn: set[str]) -> str:
    """report.md: title, inputs, the per-task table, the statistics across tasks and between
    algorithms, links to the figures drawn, and notes."""
    settings = report["settings"]
    score = settings.get("score", "return")
    what = "return" if score == "return" else f"episode figure `{score}`"
    lines = [
        f"# {title}",
        "",
        f"{len(report['algorithms'])} algorithm(s) on {len(report['tasks'])} task(s). A "
        f"seed's score is its final {what}: the mean over the training episodes that "
        "finished in the last 10% of iterations. Statistics as rliable computes them "
        "(Agarwal et al. 2021): "
        f"point estimates with 95% percentile bootstrap intervals ({settings['reps']} "
        f"resamples, seed {settings['seed']}). Over fewer than {MIN_SEEDS_FOR_CI} seeds such "
        "an interval is the range of the seeds (min to max), and the tables call it so; from "
        f"{MIN_SEEDS_FOR_CI} on it is a confidence interval (95% CI).",
        "",
        *_inputs_section(report),
        f"## Per task: final {what}",
        "",
        per_task_table(report, anchors),
        "",
    ]
    if anchors:
        lines += [
            "Columns " + ", ".join(anchors) + ": published reference numbers "
            "(--anchors), blank where a label has none for the task.",
            "",
        ]
    if "per_task.png" in drawn:
        lines += [_link("per_task.png"), ""]
    lines += _across_section(report, drawn) + _improvement_section(report, drawn)
    extra = sorted({t for a in anchors.values() for t in a} - set(report["tasks"]))
    notes = report["notes"] + ([f"anchors for tasks not here: {', '.join(extra)}"] if extra else [])
    if notes:
        lines += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(lines)


@contextlib.contextmanager
def _agg_pyplot() -> Iterator[Any]:
    """pyplot drawing on Agg (rliable's interval plot makes its figure with pyplot); the
    caller's backend comes back after."""
    import matplotlib.pyplot as plt

    previous = plt.get_backend()
    plt.switch_backend("Agg")
    try:
        yield plt
    finally:
        plt.switch_backend(previous)


def cell_kind(cell: dict[str, Any]) -> str:
    """What a per-task cell's point and bar are: from 5 seeds the IQM and its 95% CI; with 4
    the IQM and the range (its bootstrap interval); with 2-3 the mean and the range
    (`stats.few_seeds_note`); with 1, the value."""
    if cell["seeds"] >= MIN_SEEDS_FOR_CI:
        return "iqm"
    if cell["seeds"] >= MIN_SEEDS_FOR_INTERVAL:
        return "iqm_range"
    return "range" if cell["seeds"] > 1 else "value"


def tick_labels(names: list[str], width: int = 24) -> tuple[list[str], int]:
    """Per-task axis labels that stay readable with many or long names (settings' rows are
    `ppo (hp.learning_rate=0.001, layer_norm=false)`): each wrapped at its commas to lines
    of about `width` characters, and set upright (90 degrees) unless every name is short.
    Returns the labels and the rotation."""
    wrapped = []
    for name in names:
        lines, line = [], ""
        for part in name.replace(", ", ",\x00").split("\x00"):
            if line and len(line) + len(part) > width:
                lines.append(line.rstrip())
                line = ""
            line += part + " "
        wrapped.append("\n".join([*lines, line.rstrip()]))
    short = len(names) <= 4 and all(len(n) <= 12 for n in names)
    return wrapped, 0 if short else 90


def score_label(score: str) -> str:
    """The plotted score in words: `final episode return`, or `final score percent`."""
    return "final episode return" if score == "return" else f"final {score.replace('_', ' ')}"


def _per_task_figure(report: dict[str, Any], path: Path) -> Any:
    """Per task, a point and bar per algorithm, each of its kind (`cell_kind`: marker and
    legend say which); the axes name the score. Returns the `Figure` saved to `path`."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone
    from matplotlib.lines import Line2D

    tasks, algorithms = report["tasks"], report["algorithms"]
    cols = min(4, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    cells = [report["per_task"][t].get(a) for t in tasks for a in algorithms]
    kinds = [k for k in CELL_KINDS if any(c and cell_kind(c) == k for c in cells)]
    legend_height = 0.18 * len(kinds) + 0.1
    labels, turn = tick_labels(algorithms)
    longest = max(len(line) for label in labels for line in label.splitlines())
    label_height = 0.0 if not turn else 0.08 * longest  # inches of upright text
    fig = Figure(
        figsize=(1.2 + 1.1 * len(algorithms) * cols, (3.2 + label_height) * rows + legend_height)
    )
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, task in zip(axes, tasks, strict=False):
        for i, algo in enumerate(algorithms):
            cell = report["per_task"][task].get(algo)
            if cell:
                kind = cell_kind(cell)
                (low, high), centre = cell["iqm_ci95"], cell["iqm"]
                if kind in ("range", "value"):  # what the legend says: the mean and the range
                    low, high, centre = min(cell["scores"]), max(cell["scores"]), cell["mean"]
                elif kind == "iqm_range":  # the IQM, and the range its interval is
                    low, high = min(cell["scores"]), max(cell["scores"])
                bar = None if kind == "value" else [[centre - low], [high - centre]]
                ax.errorbar(i, centre, yerr=bar, fmt=CELL_KINDS[kind][0], capsize=5, color=f"C{i}")
        ax.set_xticks(range(len(algorithms)), labels, rotation=turn)
        ax.set_xlim(-0.6, len(algorithms) - 0.4)
        ax.set_title(task, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel(score_label(report["settings"].get("score", "return")))
    handles = [Line2D([], [], color="0.4", marker=CELL_KINDS[k][0], linestyle="") for k in kinds]
    fig.legend(handles, [CELL_KINDS[k][1] for k in kinds], loc="lower center", fontsize=8)
    fig.tight_layout(rect=(0, legend_height / fig.get_figheight(), 1, 1))
    fig.savefig(path, format="png", dpi=100)
    return fig


def _aggregate_figure(report: dict[str, Any], path: Path) -> None:
    from rliable import plot_utils

    metrics = report["across_tasks"]["metrics"]
    point = {a: [m[name]["value"] for name in METRICS] for a, m in metrics.items()}
    interval = {a: np.array([m[name]["ci95"] for name in METRICS]).T for a, m in metrics.items()}
    with _agg_pyplot() as plt:
        fig, _ = plot_utils.plot_interval_estimates(
            point,
            interval,
            metric_names=list(METRICS),
            xlabel="min-max normalised score",
            subfigure_width=3.4,
            row_height=0.6,
            xlabel_y_coordinate=-0.5 / (0.6 * len(metrics)),
        )
        try:
            fig.savefig(path, bbox_inches="tight", format="png")
        finally:
            plt.close(fig)


def _profile_figure(report: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure
    from rliable import plot_utils

    profile = dict(report["across_tasks"]["performance_profile"])
    tau = np.array(profile.pop("tau"))
    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.subplots()
    plot_utils.plot_performance_profiles(
        {a: np.array(p["fraction"]) for a, p in profile.items()},
        tau,
        performance_profile_cis={a: np.array(p["ci95"]) for a, p in profile.items()},
        ax=ax,
        xlabel=r"min-max normalised score ($\tau$)",
        ylabel=r"fraction of runs with score > $\tau$",
        legend=True,
        labelsize="medium",
        ticklabelsize="medium",
        legendsize="medium",
    )
    fig.savefig(path, bbox_inches="tight", format="png")


def _improvement_figure(report: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure
    from rliable import plot_utils

    pairs = report["probability_of_improvement"]
    fig = Figure(figsize=(5, 1.2 + 0.5 * len(pairs)), dpi=100)
    plot_utils.plot_probability_of_improvement(
        {f"{p['x']}\t{p['y']}": p["probability"] for p in pairs},
        {f"{p['x']}\t{p['y']}": np.array(p["ci95"]) for p in pairs},
        pair_separator="\t",
        ax=fig.subplots(),
        ticklabelsize="medium",
        labelsize="medium",
    )
    fig.savefig(path, bbox_inches="tight", format="png")


def _draw(report: dict[str, Any], out: Path, drawn: dict[str, Path]) -> None:
    """Each figure that applies, under a temporary name in `out`, recorded in `drawn` (name ->
    temporary path) before it is written."""
    draw = {"per_task.png": _per_task_figure}
    if report["across_tasks"] is not None:
        draw.update(
            {"aggregate.png": _aggregate_figure, "performance_profile.png": _profile_figure}
        )
    if report["probability_of_improvement"] is not None:
        draw["probability_of_improvement.png"] = _improvement_figure
    for name, function in draw.items():
        drawn[name] = out / f".{name}.tmp"
        function(report, drawn[name])


def write_report(
    report: dict[str, Any], out: Path, anchors: dict | None = None, title: str | None = None
) -> None:
    """report.md, report.json and the figures into `out` (created if missing); a figure of
    an earlier report there that does not apply now is removed."""
    anchors = anchors or {}
    title = title or f"{', '.join(report['algorithms'])} on {len(report['tasks'])} task(s)"
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    temporary: dict[str, Path] = {}
    try:
        _draw(report, out, temporary)
        full = {"title": title, **report, "anchors": anchors, "figures": sorted(temporary)}
        temporary["report.json"] = out / ".report.json.tmp"
        temporary["report.json"].write_text(json.dumps(full, indent=1) + "\n")
        temporary["report.md"] = out / ".report.md.tmp"
        temporary["report.md"].write_text(markdown(report, anchors, title, set(full["figures"])))
    except BaseException:
        for path in temporary.values():
            path.unlink(missing_ok=True)
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    for name in set(FIGURES) - set(temporary):
        (out / name).unlink(missing_ok=True)
    for name, path in temporary.items():  # report.md last
        os.replace(path, out / name)
