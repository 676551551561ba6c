"""Statistics over seeds: the final-return figure, robust aggregates and intervals.

The final return of a seed is the mean return of the episodes that finished in the last 10%
of iterations. Across seeds we follow rliable (Agarwal et al. 2021): the interquartile mean
(IQM, the mean of the middle 50% of seeds, `scipy.stats.trim_mean(x, 0.25)`) and
percentile-bootstrap 95% confidence intervals. Host-side numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlax_trpo.report.aggregate import (  # the seed-count rules, stated once there
    MIN_SEEDS_FOR_CI,
    MIN_SEEDS_FOR_INTERVAL,
    few_seeds_note,
)

if TYPE_CHECKING:  # annotations only: this module stays free of JAX
    from rlax_trpo.config.sweep import Sweep


def to_numpy(metrics: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Metrics as float64 numpy arrays of shape `[seeds, iterations]` (adds a seed axis)."""
    out = {}
    for name, value in metrics.items():
        arr = np.asarray(value, dtype=np.float64)
        out[name] = arr[None] if arr.ndim == 1 else arr
    return out


def final_returns(
    metrics: Mapping[str, np.ndarray], last_fraction: float = 0.1, name: str = "return"
) -> np.ndarray:
    """Per seed: mean return of the episodes that finished in the last 10% of iterations
    (or of another episode figure, `episode/<name>_sum`, such as Craftax's achievements).

    Uses the per-iteration sums and counts, so every finished episode weighs the same.
    A seed with no finished episode in that window gets NaN.
    """
    sums, counts = metrics[f"episode/{name}_sum"], metrics["episode/count"]
    iters = sums.shape[-1]
    start = iters - max(1, math.ceil(iters * last_fraction))
    s, c = sums[..., start:].sum(-1), counts[..., start:].sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)


def episode_figure_names(metrics: Mapping[str, Any]) -> list[str]:
    """The environment's own episode figures logged as `episode/<name>_sum` (not the return)."""
    return sorted(
        k.removeprefix("episode/").removesuffix("_sum")
        for k in metrics
        if k.startswith("episode/") and k.endswith("_sum") and k != "episode/return_sum"
    )


def nonfinite_by_member(metrics: Mapping[str, np.ndarray]) -> dict[int, tuple[int, str]]:
    """member -> (iteration, metric) of its earliest non-finite value (members with none
    are left out; what is skipped as in `first_nonfinite`)."""
    found: dict[int, tuple[int, str]] = {}
    for name, arr in metrics.items():
        if name == "episode/return" or name.startswith("eval/"):
            continue
        bad = ~np.isfinite(np.asarray(arr))
        for member in np.nonzero(bad.any(axis=1))[0]:
            it = int(np.argmax(bad[member]))
            if int(member) not in found or it < found[int(member)][0]:
                found[int(member)] = (it, name)
    return found


def first_nonfinite(metrics: Mapping[str, np.ndarray]) -> tuple[int, int, str] | None:
    """(member, iteration, metric) of the earliest non-finite value, or None.

    `episode/return` starts as NaN until an episode finishes and periodic evaluations
    (`eval/...`) are NaN between them, so neither is checked.
    """
    worst = None
    for name, arr in metrics.items():
        if name == "episode/return" or name.startswith("eval/"):
            continue
        bad = ~np.isfinite(arr)
        if bad.any():
            seeds, iters = np.nonzero(bad)
            i = int(np.argmin(iters))
            cand = (int(seeds[i]), int(iters[i]), name)
            if worst is None or cand[1] < worst[1]:
                worst = cand
    return worst


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: drop `floor(n/4)` lowest and highest values, average the rest."""
    x = np.sort(np.asarray(x, np.float64), axis=axis)
    n = x.shape[axis]
    cut = int(0.25 * n)
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def bootstrap_ci(
    x: np.ndarray,
    statistic=np.mean,
    num_resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of `statistic` over the values `x` (seeds).

    Resamples seeds with replacement; with one value the interval is that value.
    """
    x = np.asarray(x, np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(num_resamples, len(x)))
    stats = statistic(x[idx], axis=-1)
    lo, hi = np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def smooth_curves(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over `window` iterations of each row of `[seeds, iterations]`,
    over the finite values in the window (NaN where the window has none)."""
    values = np.asarray(values, np.float64)
    if window <= 1:
        return values
    finite = np.isfinite(values)
    zeros = np.zeros(values.shape[:-1] + (1,))
    sums = np.concatenate([zeros, np.cumsum(np.where(finite, values, 0.0), -1)], -1)
    counts = np.concatenate([zeros, np.cumsum(finite, -1)], -1)
    ends = np.arange(1, values.shape[-1] + 1)
    starts = np.maximum(ends - window, 0)
    total, count = sums[..., ends] - sums[..., starts], counts[..., ends] - counts[..., starts]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def curve_statistic(
    values: np.ndarray, num_resamples: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, str]:
    """Per iteration of `[seeds, iterations]`: (centre, low, high, centre's name, band's name).

    From 4 finite seeds on, the IQM with a 95% percentile-bootstrap interval of the IQM, as
    the summary reports final returns (named a confidence interval from 5 seeds on: with 4 it
    is the range, `few_seeds_note`); with 2-3 the mean and the range (what the IQM and the
    bootstrap come to there); with 1 the value and no band. NaN values (iterations before
    a seed's first finished episode) are left out.
    """
    values = np.asarray(values, np.float64)
    n, iters = values.shape
    centre, low, high = (np.full(iters, np.nan) for _ in range(3))
    finite = np.isfinite(values)
    rng = np.random.default_rng(seed)
    for k in np.unique(finite.sum(0)):
        cols = np.nonzero(finite.sum(0) == k)[0]
        if k == 0:
            continue
        # Each column's finite values first (sorted), so x[:, :k] holds them.
        x = np.sort(np.where(finite[:, cols], values[:, cols], np.inf), axis=0)[:k].T
        if k < MIN_SEEDS_FOR_INTERVAL:
            centre[cols], low[cols], high[cols] = x.mean(1), x.min(1), x.max(1)
            continue
        centre[cols] = iqm(x)
        idx = rng.integers(0, k, size=(num_resamples, k))
        step = max(1, 4_000_000 // (num_resamples * k))  # bounded memory
        for a in range(0, len(cols), step):
            boot = iqm(x[a : a + step][:, idx])  # [columns, resamples]
            low[cols[a : a + step]], high[cols[a : a + step]] = np.quantile(
                boot, [0.025, 0.975], axis=-1
            )
    if n == 1:
        return centre, low, high, "value", ""
    if n < MIN_SEEDS_FOR_INTERVAL:
        return centre, low, high, "mean", f"range (min to max, {n} seeds)"
    if n < MIN_SEEDS_FOR_CI:  # the bootstrap band is the range there (`few_seeds_note`)
        return centre, low, high, "IQM", f"range (min to max, {n} seeds)"
    return centre, low, high, "IQM", f"95% bootstrap CI ({n} seeds)"


def member_summaries(
    finals: np.ndarray,
    sweep: Sweep,
    num_seeds: int,
    eval_returns: np.ndarray | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """One summary per setting from per-member final returns `[settings x seeds]`.

    Each has the setting's values, `final_return_mean`/`_std`, `final_return_iqm`, and 95%
    bootstrap intervals of the mean and of the IQM over the seeds with a finished episode,
    and `interval_note` (`few_seeds_note`: None from 5 such seeds on, where the interval is
    a confidence interval and not the range).
    Returns the list and the index of the best setting (highest IQM; None if no setting
    finished an episode).
    """
    settings = sweep.settings or [{}]
    per_setting = np.asarray(finals, np.float64).reshape(len(settings), num_seeds)
    members, best, best_key = [], None, None
    for i, (values, f) in enumerate(zip(settings, per_setting, strict=True)):
        ok = f[np.isfinite(f)]
        entry: dict[str, Any] = {"index": i, "hp": values, "final_return_per_seed": f}
        if ok.size:
            entry.update(
                {
                    "final_return_mean": float(ok.mean()),
                    "final_return_std": float(ok.std()),
                    "final_return_iqm": float(iqm(ok)),
                    "final_return_mean_ci95": list(bootstrap_ci(ok, np.mean)),
                    "final_return_iqm_ci95": list(bootstrap_ci(ok, iqm)),
                    "seeds_with_episodes": int(ok.size),
                    "interval_note": few_seeds_note(int(ok.size)),
                }
            )
            key = (entry["final_return_iqm"], entry["final_return_mean"])
            if best_key is None or key > best_key:
                best, best_key = i, key
        else:
            entry.update(
                {
                    "final_return_mean": None,
                    "final_return_std": None,
                    "final_return_iqm": None,
                    "final_return_mean_ci95": None,
                    "final_return_iqm_ci95": None,
                    "seeds_with_episodes": 0,
                    "interval_note": "no seed finished an episode",
                }
            )
        if eval_returns is not None:
            e = np.asarray(eval_returns, np.float64).reshape(len(settings), num_seeds, -1)[i]
            entry["eval_return_mean"] = float(e.mean())
        members.append(entry)
    return members, best


def concatenate_chunks(chunks: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Metrics of consecutive chunks, `[population, k]` each, joined along iterations; a metric
    missing from a chunk (e.g. a periodic evaluation) is NaN there."""
    names = sorted({n for chunk in chunks for n in chunk})

    def part(chunk: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        return chunk.get(name, np.full(next(iter(chunk.values())).shape, np.nan))

    return {n: np.concatenate([part(c, n) for c in chunks], axis=1) for n in names}


def divergence(
    metrics: Mapping[str, np.ndarray],
    diverged_at: np.ndarray | None,
    seeds: int,
    sweep: Sweep | None = None,
) -> dict[str, Any] | None:
    """Which members diverged (`summary["diverged"]`), or None: the earliest one's `seed`,
    `member`, `setting`, `iteration` and `metric` at the top, `count`, and every diverged
    member in `members`. A member diverged where its parameters skipped a non-finite update
    (`diverged_at`, -1 for none) or a metric first became non-finite."""
    settings = (sweep.settings if sweep is not None else None) or [{}]
    by_metric = nonfinite_by_member(metrics)
    at = np.full(len(settings) * seeds, -1) if diverged_at is None else np.asarray(diverged_at)
    found = []
    for member in sorted(set(by_metric) | {int(m) for m in np.nonzero(at >= 0)[0]}):
        it, metric = by_metric.get(member, (None, "parameters"))
        if member < len(at) and at[member] >= 0:
            it = int(at[member])
        found.append(
            {
                "member": member,
                "seed": member % seeds,
                "setting": dict(settings[member // seeds])
                if member // seeds < len(settings)
                else {},
                "iteration": it,
                "metric": metric,
            }
        )
    if not found:
        return None
    first = min(found, key=lambda d: (d["iteration"], d["member"]))
    return {**first, "count": len(found), "members": found}


def diverged_mask(metrics: Mapping[str, np.ndarray], diverged: dict[str, Any] | None):
    """`metrics` with every diverged member's values NaN from its divergence on: what it
    computed after it no longer counts in the summary's figures (nor as the best setting)."""
    if diverged is None:
        return metrics
    out = {k: np.array(v, np.float64, copy=True) for k, v in metrics.items()}
    for d in diverged["members"]:
        for v in out.values():
            v[d["member"], d["iteration"] :] = np.nan
    return out
