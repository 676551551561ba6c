"""Host-side reporting: metrics tables, the final-return statistic, CSV, plots, progress bar.

Nothing here is traced; it consumes the `[seeds, iterations]` arrays a run returns.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def to_numpy(metrics: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Metrics as float64 numpy arrays of shape `[seeds, iterations]` (adds a seed axis)."""
    out = {}
    for name, value in metrics.items():
        arr = np.asarray(value, dtype=np.float64)
        out[name] = arr[None] if arr.ndim == 1 else arr
    return out


def final_returns(metrics: Mapping[str, np.ndarray], last_fraction: float = 0.1) -> np.ndarray:
    """Per seed: mean return of the episodes that finished in the last 10% of iterations.

    Uses the per-iteration sums and counts, so every finished episode weighs the same.
    A seed with no finished episode in that window gets NaN.
    """
    sums, counts = metrics["episode/return_sum"], metrics["episode/count"]
    iters = sums.shape[-1]
    start = iters - max(1, math.ceil(iters * last_fraction))
    s, c = sums[..., start:].sum(-1), counts[..., start:].sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)


def first_nonfinite(metrics: Mapping[str, np.ndarray]) -> tuple[int, int, str] | None:
    """(seed, iteration, metric) of the earliest non-finite value, or None.

    `episode/return` starts as NaN until an episode finishes, so it is not checked.
    """
    worst = None
    for name, arr in metrics.items():
        if name == "episode/return":
            continue
        bad = ~np.isfinite(arr)
        if bad.any():
            seeds, iters = np.nonzero(bad)
            i = int(np.argmin(iters))
            cand = (int(seeds[i]), int(iters[i]), name)
            if worst is None or cand[1] < worst[1]:
                worst = cand
    return worst


def write_metrics_csv(
    path: Path,
    metrics: Mapping[str, np.ndarray],
    steps_per_iteration: int,
    extra_columns: Mapping[str, Sequence[Any]] | None = None,
) -> None:
    """One row per seed x iteration: seed, iteration, env_steps, then every metric.

    `extra_columns` maps a column name to one value per seed (e.g. swept hyperparameters).
    """
    names = sorted(metrics)
    num_seeds, iters = metrics[names[0]].shape
    extra = dict(extra_columns or {})
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", "env_steps", *extra, *names])
        for s in range(num_seeds):
            for i in range(iters):
                row = [s, i, (i + 1) * steps_per_iteration]
                row += [extra[k][s] for k in extra]
                row += [_fmt(metrics[n][s, i]) for n in names]
                writer.writerow(row)


def _fmt(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.6g}"


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in np.asarray(x).tolist()] if isinstance(x, np.ndarray) \
            else [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def plot_learning_curve(
    path: Path,
    metrics: Mapping[str, np.ndarray],
    steps_per_iteration: int,
    title: str,
    key: str = "episode/return",
) -> None:
    """Mean across seeds with a band of +- one std (min..max when there are 2 seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = metrics[key]
    steps = (np.arange(values.shape[1]) + 1) * steps_per_iteration
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(values, axis=0) if np.isfinite(values).any() else values[0]
        std = np.nanstd(values, axis=0) if values.shape[0] > 1 else np.zeros_like(mean)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(steps, mean, label=f"mean of {values.shape[0]} seed(s)")
    if values.shape[0] > 1:
        ax.fill_between(steps, mean - std, mean + std, alpha=0.3, label="+- 1 std")
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel(key)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


class ProgressBar:
    """A tqdm bar fed from inside the compiled run by `jax.debug.callback`.

    The callback may fire once per seed per iteration (under vmap) and out of order; the
    bar shows the furthest iteration reached and the latest mean return reported for it.
    """

    def __init__(self, total_iterations: int, steps_per_iteration: int, enabled: bool = True):
        self.total = total_iterations
        self.steps_per_iteration = steps_per_iteration
        self.enabled = enabled
        self.done = 0
        self.returns: dict[int, list[float]] = {}
        self.bar = None  # created on the first report, so nothing prints before the run

    def __call__(self, iteration: Any, latest_return: Any) -> None:
        if self.bar is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, unit="it", disable=not self.enabled,
                            dynamic_ncols=True, leave=True)
        it = int(iteration) + 1
        ret = float(latest_return)
        self.returns.setdefault(it, []).append(ret)
        if it > self.done:
            self.bar.update(it - self.done)
            self.done = it
            vals = [r for r in self.returns.pop(it, []) if math.isfinite(r)]
            shown = f"{np.mean(vals):.1f}" if vals else "n/a"
            self.bar.set_postfix_str(
                f"env_steps={it * self.steps_per_iteration:,} return={shown}", refresh=False
            )
        if len(self.returns) > 64:  # keep memory bounded
            for k in sorted(self.returns)[:-8]:
                self.returns.pop(k)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
