"""Run reports: the `summary.json` schema, `metrics.csv`, plots and the printed summary.

Host-side only; it consumes the `[population, iterations]` metric arrays a run returns.
Population members are laid out setting-major (member m = setting m // seeds, seed m % seeds).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlax_trpo.config.sweep import Sweep, setting_label
from rlax_trpo.report import lineage, stats
from rlax_trpo.report.inputs import interrupted


def write_metrics_csv(
    path: Path,
    metrics: Mapping[str, np.ndarray],
    steps_per_iteration: int,
    extra_columns: Mapping[str, Sequence[Any]] | None = None,
    seed_ids: Sequence[int] | None = None,
) -> None:
    """One row per population member x iteration: seed, iteration, env_steps, then metrics.

    `extra_columns` maps a column name to one value per member (e.g. swept hyperparameters);
    `seed_ids` is each member's seed index (default: the member index).
    """
    names = sorted(metrics)
    num_members, iters = metrics[names[0]].shape
    extra = dict(extra_columns or {})
    seeds = list(seed_ids) if seed_ids is not None else list(range(num_members))
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", "env_steps", *extra, *names])
        for s in range(num_members):
            for i in range(iters):
                row = [seeds[s], i, (i + 1) * steps_per_iteration]
                row += [
                    _fmt(float(extra[k][s])) if isinstance(extra[k][s], float) else extra[k][s]
                    for k in extra
                ]
                row += [_fmt(metrics[n][s, i]) for n in names]
                writer.writerow(row)


def _fmt(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.6g}"


def plot_curves(
    path: Path,
    curves: Mapping[str, np.ndarray],
    steps_per_iteration: int,
    title: str,
    ylabel: str = "episode/return",
    smooth: int = 1,
) -> Any:
    """One line per entry of `curves` (label -> `[seeds, iterations]`): the statistic the
    summary reports over seeds (`stats.curve_statistic`: the IQM with a 95% bootstrap band from
    4 seeds on; the mean and the range with 2-3; one seed's value), named in the legend and on
    the y axis, whose metric (`ylabel`, a key such as `episode/return`) is named in words.
    `smooth` > 1 first averages each seed over a trailing window of that many iterations.
    Returns the matplotlib `Figure` it saved to `path`."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.subplots()
    names, banded = set(), False
    for label, values in curves.items():
        values = stats.smooth_curves(values, smooth)
        steps = (np.arange(values.shape[-1]) + 1) * steps_per_iteration
        centre, low, high, name, band = stats.curve_statistic(values)
        names.add(name)
        n = values.shape[0]
        shown = f"{label}: {name} of {n} seeds" if n > 1 else f"{label}: 1 seed"
        (line,) = ax.plot(steps, centre, label=shown)
        if band:  # one legend entry names the shading
            shading = None if banded else f"shaded: {band}"
            ax.fill_between(steps, low, high, alpha=0.2, color=line.get_color(), label=shading)
            banded = True
    ax.set_xlabel("environment steps (per seed)")
    over = f", {'/'.join(sorted(names - {'value'}))} over seeds" if names - {"value"} else ""
    over += ", one seed" if "value" in names else ""
    average = f", {smooth}-iteration average" if smooth > 1 else ""
    ax.set_ylabel(f"{metric_label(ylabel)}{over}{average}")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return fig


def metric_label(key: str) -> str:
    """A metric's key in words, for a plot: `episode/return` -> `episode return`."""
    return key.replace("/", " ").replace("_", " ")


def return_summary(
    metrics: Mapping[str, np.ndarray], eval_returns: np.ndarray, sweep: Sweep, seeds: int
) -> dict[str, Any]:
    """The return figures of a control run for `summary.json`.

    Top-level figures are those of the best setting (highest IQM of final returns) when
    hyperparameters were swept, never a pool of settings; `members` has one entry per setting.
    """
    finals = stats.final_returns(metrics)
    members, best = stats.member_summaries(finals, sweep, seeds, eval_returns)
    chosen = best if best is not None else 0
    rows = slice(chosen * seeds, (chosen + 1) * seeds)
    mine, evals = finals[rows], np.asarray(eval_returns)[rows]
    ok = mine[np.isfinite(mine)]
    summary: dict[str, Any] = {
        "final_return_mean": float(ok.mean()) if ok.size else None,
        "final_return_std": float(ok.std()) if ok.size else None,
        "final_return_per_seed": mine,
        "eval_return_mean": float(evals.mean()),
        "eval_return_std": float(evals.mean(axis=1).std()),
        "eval_return_per_seed": evals.mean(axis=1).tolist(),
        "eval_episodes_per_seed": int(evals.shape[1]),
        "interval_note": members[chosen]["interval_note"],
    }
    figures = stats.episode_figure_names(metrics)
    if figures:  # the environment's own episode figures, e.g. Craftax's score and achievements
        summary["final_episode_figures_per_seed"] = {
            name: stats.final_returns(metrics, name=name)[rows].tolist() for name in figures
        }
    if sweep.names:
        summary["returns_of"] = "best setting"
    pbt = lineage.pbt_lineage(metrics, finals)
    if pbt is not None:  # population-based training: the best agent's history
        summary["pbt"] = pbt
    summary["members"] = members
    summary["best"] = (
        None
        if best is None
        else {
            "index": best,
            **{
                k: members[best][k]
                for k in ("hp", "final_return_mean", "final_return_iqm", "final_return_iqm_ci95")
            },
        }
    )
    return summary


def write_run_files(
    folder: Path,
    metrics: Mapping[str, np.ndarray],
    summary: Mapping[str, Any],
    sweep: Sweep,
    steps_per_iteration: int,
    curve: str = "episode/return",
    smooth: int = 1,
) -> None:
    """metrics.csv, learning_curve.png (metric `curve` of the best setting), sweep.png (every
    setting, when swept; both drawn by `plot_curves`, smoothed over `smooth` iterations) and,
    written last so that a run folder with a summary is whole, summary.json."""
    seeds = int(summary["num_seeds"])
    settings = sweep.settings or [{}]
    population = len(settings) * seeds
    extra = {
        name: [float(settings[m // seeds][name]) for m in range(population)] for name in sweep.names
    }
    seed_ids = [m % seeds for m in range(population)]
    # each file under a temporary name, then renamed: a crash never leaves one half written
    write_metrics_csv(folder / ".metrics.tmp.csv", metrics, steps_per_iteration, extra, seed_ids)
    os.replace(folder / ".metrics.tmp.csv", folder / "metrics.csv")
    title = f"{summary['algorithm']} on {summary['env']}"
    returns = metrics[curve].reshape(len(settings), seeds, -1)
    best = (summary.get("best") or {}).get("index", 0)
    label = f"best setting {setting_label(settings[best])}" if sweep.names else metric_label(curve)
    if sweep.names:
        curves = {setting_label(s): r for s, r in zip(settings, returns, strict=True)}
        plot_curves(
            folder / ".sweep.tmp.png",
            curves,
            steps_per_iteration,
            f"{title}: {len(settings)} settings x {seeds} seeds",
            curve,
            smooth,
        )
    plot_curves(
        folder / ".learning_curve.tmp.png",
        {label: returns[best]},
        steps_per_iteration,
        title,
        curve,
        smooth,
    )
    if "pbt" in summary:
        best_member = summary["pbt"]["best_member"]
        lineage.plot_pbt(folder / ".pbt.tmp.png", metrics, best_member, steps_per_iteration, title)
    for name in ("sweep.png", "learning_curve.png", "pbt.png"):
        if (folder / f".{name[:-4]}.tmp.png").exists():
            os.replace(folder / f".{name[:-4]}.tmp.png", folder / name)
    write_json(folder / ".summary.json.tmp", summary)
    os.replace(folder / ".summary.json.tmp", folder / "summary.json")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return [_jsonable(v) for v in x.tolist()]
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def sig(x: float, digits: int = 3) -> str:
    """`x` to at most `digits` significant figures in plain notation (0.973, 0.002, 12.5, 475;
    a larger integer part is kept whole; scientific below 1e-3 and from 1e6), trailing zeros
    dropped, zero as `0`, never `-0`."""
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    size = abs(x)
    if size < 1e-3 or size >= 1e6:
        return f"{x:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(size)))
    text = f"{round(x, decimals):.{decimals}f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return text[1:] if float(text) == 0 else text


def finished(folder: Path) -> bool:
    """Whether the run folder holds a finished run's summary.json (not an interrupted one's,
    which `--resume` finishes)."""
    try:
        return not interrupted(json.loads((folder / "summary.json").read_text()))
    except (OSError, ValueError):
        return False


def format_summary(summary: Mapping[str, Any], out: Path) -> str:
    """The lines printed at the end of a run: speed, the result (for a sweep: the best
    setting with its IQM interval, then a line per setting), and the run folder."""
    settings = summary.get("num_settings", 1)
    who = f"{summary['num_seeds']} seed(s)" + (f" x {settings} settings" if settings > 1 else "")
    unit = summary.get("unit", "env steps")
    lines = [
        f"{summary['algorithm']} on {summary['env']}: {who} x "
        f"{summary['total_env_steps']:,} {unit} in {summary['wall_seconds']:.1f} s "
        f"(+ {summary['compile_seconds']:.1f} s compile) on {summary.get('num_devices', 1)} "
        f"device(s), {summary['env_steps_per_second']:,.0f} {unit}/s"
    ]
    if "final_accuracy" in summary:  # a language-model run
        lines.append(
            f"greedy accuracy on {summary['eval_size']} held-out prompts: "
            f"{summary['initial_accuracy']:.3f} before GRPO -> {summary['final_accuracy']:.3f} "
            f"(per seed {', '.join(f'{a:.3f}' for a in summary['final_accuracy_per_seed'])})"
        )
        lines.append(f"run folder: {out}")
        return "\n".join(lines)
    fr, fs = summary.get("final_return_mean"), summary.get("final_return_std")
    final = f"{sig(fr)} +- {sig(fs)}" if fr is not None else "n/a (no finished episodes)"
    best = summary.get("best")
    if settings > 1 and best is not None:
        iqm, ci = best["final_return_iqm"], best["final_return_iqm_ci95"]
        lines.append(
            f"best setting {setting_label(best['hp'])}: final return IQM {sig(iqm)} "
            f"[{sig(ci[0])}, {sig(ci[1])}], mean {final} over {summary['num_seeds']} seed(s)"
        )
    else:
        lines.append(f"final return (training policy, last 10% of iterations): {final}")
    lines.append(f"greedy evaluation return: {sig(summary['eval_return_mean'])}")
    if summary.get("interval_note"):
        lines.append(f"note: {summary['interval_note']}")
    if settings > 1:
        for m in summary["members"]:
            iqm, ci = m["final_return_iqm"], m["final_return_iqm_ci95"]
            shown = f"IQM {sig(iqm)} [{sig(ci[0])}, {sig(ci[1])}]" if iqm is not None else "n/a"
            mark = "  <- best" if best and best["index"] == m["index"] else ""
            lines.append(
                f"  {setting_label(m['hp'])}: final return {shown}, greedy "
                f"{sig(m['eval_return_mean'])}{mark}"
            )
    lines.append(f"run folder: {out}")
    return "\n".join(lines)


def format_outcome(result: Any, resume: str | None = None) -> tuple[str, str, int]:
    """(stdout text, stderr text, exit status) at the end of a run (`experiment.RunResult`):
    0 complete, 1 diverged (parameters before it kept), 128 + signal when interrupted.
    `resume`: the command that resumes it (default `rlax-trpo train --resume <run folder>`)."""
    import signal

    if result.status == "interrupted":
        name = signal.Signals(result.signal).name
        done = next(iter(result.metrics.values())).shape[1]
        resume = resume or f"rlax-trpo train --resume {result.out}"
        files = "; metrics.csv, summary.json and the learning curve hold them"
        kept = files if result.summary else ""
        return (
            "",
            (
                f"error: interrupted by {name} after iteration {done}; checkpoint saved{kept}; "
                f"resume with: {resume}\n"
            ),
            128 + result.signal,
        )
    if result.summary is None:  # another process of a multi-host run wrote the folder
        return "", "", 0
    text = format_summary(result.summary, result.out) + "\n"
    if result.status != "diverged":
        return text, "", 0
    d = result.summary["diverged"]
    population = int(result.summary.get("population", d["count"]))
    setting = f"setting {setting_label(d['setting'])}, " if d.get("setting") else ""
    others = population - d["count"]
    rest = f"; the other {others} member(s) ran to the end" if others else ""
    return (
        text,
        (
            f"error: run diverged in {d['count']} of {population} member(s): {setting}"
            f"seed {d['seed']} became non-finite at iteration {d['iteration']} ({d['metric']}) "
            f"(member {d['member']}); each diverged member's parameters from before its first "
            f"non-finite update were kept in {result.out}{rest}\n"
        ),
        1,
    )
