"""`rlax-trpo report`'s numbers: statistics over finished runs as rliable (Agarwal et al.
2021) defines them; `rlax_trpo.report.render` writes them out (markdown, JSON, figures).

A cell is (algorithm, task); its scores are the runs' `final_return_per_seed`, or an episode
figure's (`score`). Inputs (`rlax_trpo.report.inputs`) are run folders, results published by
`benchmarks/standard_tables.py` and folders of either. Per cell: IQM and
mean with 95% percentile-bootstrap intervals over seeds. Across tasks: min-max normalised
scores' IQM, mean, median and optimality gap with stratified-bootstrap intervals, performance
profiles, and between algorithms the probability of improvement. Every estimate is rliable's
(`get_interval_estimates`, imported when the statistics run; no JAX here), which resamples with
numpy's global generator: each estimate seeds it with `seed` and restores the caller's state.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlax_trpo.report.inputs import ReportError, load_runs
from rlax_trpo.report.settings import cells_of

RLIABLE_MISSING = 'needs rliable: pip install "rlax_trpo[report]"'
CONFIDENCE = 0.95
METRICS = ("IQM", "mean", "median", "optimality gap")
INTERVAL = "percentile bootstrap over seeds, stratified by task (rliable get_interval_estimates)"
# The seed counts every part of the report reads (`few_seeds_note`
# says why): an IQM that is not the mean from 4, an interval that is a confidence interval
# and not the seeds' range from 5.
MIN_SEEDS_FOR_INTERVAL = 4
MIN_SEEDS_FOR_CI = 5


def few_seeds_note(num_seeds: int) -> str | None:
    """Why the interval of fewer than 5 seeds is the range, not a confidence interval, and
    the IQM of fewer than 4 the mean; None from 5 on.

    The IQM of n values drops `floor(n/4)` at each end. With n < 4 it drops none (it is the
    mean), and a resample of only the smallest value has probability `n**-n >= 1/27`. With
    n = 4 it is the mean of the middle two, and a resample holding the smallest value 3 or 4
    times (its IQM is that value) has probability `13/256 = 5.1%`. Either way more than 2.5%,
    so the percentile bootstrap's 2.5% and 97.5% quantiles are the smallest and the largest
    value: the range. From n = 5 (at most `21/3125 = 0.7%`) the interval lies inside it.
    """
    if num_seeds >= MIN_SEEDS_FOR_CI:
        return None
    if num_seeds >= MIN_SEEDS_FOR_INTERVAL:
        return (
            f"{num_seeds} seeds: the 95% bootstrap interval of an IQM of {num_seeds} values is "
            f"their range (min to max), not a confidence interval; use {MIN_SEEDS_FOR_CI} or "
            "more seeds for one"
        )
    return (
        f"{num_seeds} seed(s) are too few for an IQM or a 95% bootstrap interval: the IQM is "
        f"the mean and the interval is the range (min to max); use {MIN_SEEDS_FOR_CI} "
        "or more seeds"
    )


def interval_name(num_seeds: int) -> str:
    """What the 95% percentile-bootstrap interval over `num_seeds` seeds is, in words."""
    return "95% CI" if num_seeds >= MIN_SEEDS_FOR_CI else "range"


class RliableMissing(ReportError):
    """rliable (or a library it imports) cannot be imported."""


def load_rliable() -> tuple[Any, Any]:
    """rliable's `library` and `metrics` modules, or `RliableMissing`."""
    try:
        from rliable import library, metrics
    except ImportError as err:
        raise RliableMissing(RLIABLE_MISSING) from err
    except Exception as err:  # an installed but broken dependency (arch, pandas)
        why = " ".join(f"{type(err).__name__}: {err}".split())
        raise RliableMissing(f"{RLIABLE_MISSING} (importing it failed: {why})") from err
    return library, metrics


def parse_setting(value: str | int | None) -> str | int | None:
    """`--setting N|best`: a sweep's setting index (0, 1, ...), "best", or None (each setting
    its own row)."""
    if value is None or value == "best":
        return value
    text = str(value).strip()
    if not text.isdigit():
        raise ReportError(f"--setting: {value!r} is not a setting's index (0, 1, ...) or best")
    return int(text)


def parse_ranges(specs: Sequence[str]) -> dict[str, tuple[float, float]]:
    """`--range TASK=LO,HI` values: task -> (LO, HI), finite numbers with LO < HI."""
    ranges: dict[str, tuple[float, float]] = {}
    for spec in specs:
        task, eq, bounds = spec.rpartition("=")
        try:
            lo, hi = (float(b) for b in bounds.split(","))
        except ValueError:
            lo = hi = math.nan
        if not (eq and task and math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ReportError(f"--range: {spec!r} is not TASK=LO,HI with numbers LO < HI")
        if task in ranges:
            raise ReportError(f"--range: task {task!r} is given twice")
        ranges[task] = (lo, hi)
    return ranges


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """numpy's global generator seeded with `seed`, restored on exit: rliable's bootstraps
    draw their resamples from it (`np.random.choice`), not from their `random_state`."""
    saved = np.random.get_state()  # noqa: NPY002
    np.random.seed(seed)  # noqa: NPY002
    try:
        yield
    finally:
        np.random.set_state(saved)  # noqa: NPY002


def estimates(score_dict: dict, func, reps: int, seed: int) -> tuple[dict, dict]:
    """rliable's point estimates of `func` and their 95% percentile stratified-bootstrap
    intervals (`get_interval_estimates`; an interval is `[2, k]`: lows, highs)."""
    library, _ = load_rliable()
    with _seeded(seed):
        return library.get_interval_estimates(
            score_dict, func, reps=reps, confidence_interval_size=CONFIDENCE
        )


def per_task(cells: dict[tuple[str, str], list[float]], reps: int, seed: int) -> dict:
    """task -> algorithm -> seeds, scores, IQM and mean with 95% bootstrap intervals over
    seeds, what the interval is (`interval`: "95% CI" from 5 seeds on, else "range") and
    `few_seeds_note` (None from 4 seeds on)."""
    _, metrics = load_rliable()
    func = lambda s: np.array([metrics.aggregate_iqm(s), metrics.aggregate_mean(s)])
    out: dict[str, dict[str, Any]] = {}
    for (algo, task), scores in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        x = np.asarray(scores, np.float64)[:, None]  # [seeds, 1 task]
        point, interval = estimates({algo: x}, func, reps, seed)
        (iqm, mean), ci = point[algo], interval[algo]
        out.setdefault(task, {})[algo] = {
            "seeds": len(scores),
            "scores": list(scores),
            "iqm": float(iqm),
            "iqm_ci95": [float(ci[0, 0]), float(ci[1, 0])],
            "mean": float(mean),
            "mean_ci95": [float(ci[0, 1]), float(ci[1, 1])],
            "interval": interval_name(len(scores)),
            "note": _few_seeds_note(len(scores)),
        }
    return out


def _few_seeds_note(n: int) -> str | None:
    """Why a cell of fewer than 4 seeds has the mean for its IQM (with 4, the cell's interval
    is called a range, and the report's text says why)."""
    return few_seeds_note(n) if n < MIN_SEEDS_FOR_INTERVAL else None


def score_matrices(cells: dict, algorithms: list[str], tasks: list[str]) -> tuple[dict, list]:
    """algorithm -> `[seeds, tasks]` scores on `tasks`; an algorithm with more seeds on some
    task keeps its first `min` seeds of every task (rliable needs a matrix). And notes. No
    `tasks` (no task every algorithm ran): no matrices."""
    matrices, notes = {}, []
    for algo in algorithms if tasks else []:
        counts = [len(cells[algo, t]) for t in tasks]
        k = min(counts)
        if len(set(counts)) > 1:
            notes.append(
                f"{algo}: {', '.join(map(str, counts))} seeds on {', '.join(tasks)}; "
                f"the statistics across tasks use the first {k} of each"
            )
        matrices[algo] = np.array([cells[algo, t][:k] for t in tasks], np.float64).T
    return matrices, notes


def score_ranges(cells: dict, tasks: list[str], given: dict[str, tuple[float, float]]) -> dict:
    """task -> (low, high, where from): `--range`, else the min and max of its scores."""
    out = {}
    for task in tasks:
        if task in given:
            out[task] = (*given[task], "--range")
        else:
            scores = [s for (_, t), v in cells.items() if t == task for s in v]
            out[task] = (min(scores), max(scores), "min and max of its scores")
    return out


def across_tasks(matrices: dict, tasks: list[str], ranges: dict, reps: int, seed: int) -> dict:
    """Min-max normalised scores' IQM, mean, median and optimality gap with 95% stratified
    bootstrap intervals, and performance profiles (tau 0 to 1), per algorithm."""
    library, metrics = load_rliable()
    lo = np.array([ranges[t][0] for t in tasks])
    width = np.array([ranges[t][1] - ranges[t][0] for t in tasks])
    normalised = {a: (m - lo) / width for a, m in matrices.items()}
    parts = (
        metrics.aggregate_iqm,
        metrics.aggregate_mean,
        metrics.aggregate_median,
        metrics.aggregate_optimality_gap,
    )  # in the order of METRICS
    func = lambda s: np.array([part(s) for part in parts])
    point, interval = estimates(normalised, func, reps, seed)
    taus = np.linspace(0.0, 1.0, 101)
    with _seeded(seed):
        profiles, profile_cis = library.create_performance_profile(normalised, taus, reps=reps)
    return {
        "tasks": tasks,
        "ranges": {t: dict(zip(("low", "high", "from"), ranges[t], strict=True)) for t in tasks},
        "seeds_per_task": {a: int(m.shape[0]) for a, m in matrices.items()},
        "metrics": {
            a: {
                name: {"value": float(point[a][i]), "ci95": [float(v) for v in interval[a][:, i]]}
                for i, name in enumerate(METRICS)
            }
            for a in normalised
        },
        "performance_profile": {
            "tau": taus.tolist(),
            **{
                a: {"fraction": profiles[a].tolist(), "ci95": profile_cis[a].tolist()}
                for a in profiles
            },
        },
    }


def improvement(matrices: dict, reps: int, seed: int) -> list[dict[str, Any]]:
    """P(X > Y) for every ordered pair of algorithms, on their common tasks, with its 95%
    stratified independent-bootstrap interval (rliable's `probability_of_improvement`)."""
    _, metrics = load_rliable()
    pairs = {(x, y): (matrices[x], matrices[y]) for x in matrices for y in matrices if x != y}
    point, interval = estimates(pairs, metrics.probability_of_improvement, reps, seed)
    return [
        {
            "x": x,
            "y": y,
            "probability": float(point[x, y]),
            "ci95": [float(v) for v in np.ravel(interval[x, y])],
        }
        for x, y in pairs
    ]


def build_report(
    paths: Sequence[Path],
    range_specs: Sequence[str] = (),
    reps: int = 2000,
    seed: int = 0,
    score: str = "return",
    setting: str | int | None = None,
) -> dict[str, Any]:
    """The report's numbers (report.json): its inputs, per-task statistics and, where they
    apply, the statistics across tasks and between algorithms, with notes on what was done
    (inputs skipped, a sweep's settings split or chosen: `setting`, an index or "best").
    Every input is checked (`ReportError`) before rliable is imported (`RliableMissing`)."""
    if reps < 1:
        raise ReportError(f"--reps: must be a positive integer (got {reps})")
    if not 0 <= seed < 2**32:
        raise ReportError(f"--seed: must be an integer from 0 to 2**32 - 1 (got {seed})")
    given = parse_ranges(range_specs)
    setting = parse_setting(setting)
    runs, notes = load_runs(paths, score, setting)
    cells, more = cells_of(runs)
    notes += more
    algorithms, tasks = sorted({a for a, _ in cells}), sorted({t for _, t in cells})
    unknown = sorted(set(given) - set(tasks))
    if unknown:
        raise ReportError(f"--range: no task {unknown[0]!r} here (tasks: {', '.join(tasks)})")
    load_rliable()
    common = [t for t in tasks if all((a, t) in cells for a in algorithms)]
    notes += [
        f"{t}: not run by every algorithm, so left out across tasks and algorithms"
        for t in tasks
        if t not in common
    ]
    matrices, more = score_matrices(cells, algorithms, common)
    ranges = score_ranges(cells, common, given)
    flat = [t for t in common if ranges[t][0] == ranges[t][1]]
    notes += more + [
        f"{t}: every score is {ranges[t][0]:g}, no range to normalise by (give "
        "--range); left out across tasks"
        for t in flat
    ]
    used = [t for t in common if t not in flat]
    report: dict[str, Any] = {
        "settings": {
            "reps": reps,
            "seed": seed,
            "confidence": CONFIDENCE,
            "interval": INTERVAL,
            "score": score,
            "setting": setting,
        },
        "algorithms": algorithms,
        "tasks": tasks,
        "inputs": runs,
        "per_task": per_task(cells, reps, seed),
        "across_tasks": None,
        "probability_of_improvement": None,
        "skipped": {},
        "notes": notes,
    }
    return _between_tasks_and_algorithms(report, matrices, common, used, ranges)


def _between_tasks_and_algorithms(
    report: dict[str, Any], matrices: dict, common: list[str], used: list[str], ranges: dict
) -> dict[str, Any]:
    """`report` with the statistics across tasks (2 or more tasks with a range) and between
    algorithms (2 or more algorithms on a common task), or why each was skipped."""
    reps, seed = report["settings"]["reps"], report["settings"]["seed"]
    if len(used) >= 2:
        columns = [common.index(t) for t in used]
        chosen = {a: m[:, columns] for a, m in matrices.items()}
        report["across_tasks"] = across_tasks(chosen, used, ranges, reps, seed)
    else:
        report["skipped"]["across_tasks"] = (
            f"{len(used)} task(s) that every algorithm ran (with a range to normalise by); "
            "the aggregate metrics and the performance profile need 2 or more"
        )
    if len(report["algorithms"]) >= 2 and common:
        report["probability_of_improvement"] = improvement(matrices, reps, seed)
    else:
        one = len(report["algorithms"]) < 2
        why = "one algorithm" if one else "no task that every algorithm ran"
        report["skipped"]["probability_of_improvement"] = f"{why}; it compares two on a task"
    return report
