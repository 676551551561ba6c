"""Host-side reporting: metrics tables, the final-return statistic, CSV, plots, progress bar.

Nothing here is traced; it consumes the `[seeds, iterations]` arrays a run returns.
"""

from __future__ import annotations

import csv
import json
import math
import warnings
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


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return (
            [_jsonable(v) for v in np.asarray(x).tolist()]
            if isinstance(x, np.ndarray)
            else [_jsonable(v) for v in x]
        )
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


def plot_members(
    path: Path,
    metrics: Mapping[str, np.ndarray],
    steps_per_iteration: int,
    labels: Sequence[str],
    title: str,
    key: str = "episode/return",
) -> None:
    """One curve per sweep setting (mean over its seeds, band of +- one std).

    `metrics[key]` is `[settings x seeds, iterations]`, setting-major.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = metrics[key]
    per = values.reshape(len(labels), -1, values.shape[-1])
    steps = (np.arange(values.shape[-1]) + 1) * steps_per_iteration
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for label, v in zip(labels, per, strict=True):
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, std = np.nanmean(v, axis=0), np.nanstd(v, axis=0)
        (line,) = ax.plot(steps, mean, label=label)
        if v.shape[0] > 1:
            ax.fill_between(steps, mean - std, mean + std, alpha=0.15, color=line.get_color())
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel(key)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


class ProgressBar:
    """A tqdm bar fed from inside the compiled run by `jax.debug.callback`.

    The callback may fire once per member per iteration (under vmap) and out of order; the
    bar shows the furthest iteration reached, the latest mean return reported for it, the
    ETA, and env steps/s over the whole population. `start` is the iteration a resumed run
    begins at.
    """

    def __init__(
        self,
        total_iterations: int,
        steps_per_iteration: int,
        enabled: bool = True,
        population: int = 1,
        start: int = 0,
    ):
        self.total = total_iterations
        self.steps_per_iteration = steps_per_iteration
        self.population = population
        self.enabled = enabled
        self.start = start
        self.done = start
        self.returns: dict[int, list[float]] = {}
        self.bar = None  # created on the first report, so nothing prints before the run

    def __call__(self, iteration: Any, latest_return: Any) -> None:
        if self.bar is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=self.total,
                initial=self.start,
                unit="it",
                disable=not self.enabled,
                dynamic_ncols=True,
                leave=True,
            )
        it = int(iteration) + 1
        ret = float(latest_return)
        self.returns.setdefault(it, []).append(ret)
        if it > self.done:
            self.bar.update(it - self.done)
            self.done = it
            vals = [r for r in self.returns.pop(it, []) if math.isfinite(r)]
            shown = f"{np.mean(vals):.1f}" if vals else "n/a"
            rate = self.bar.format_dict.get("rate") or 0.0
            sps = rate * self.steps_per_iteration * self.population
            self.bar.set_postfix_str(
                f"env_steps={it * self.steps_per_iteration:,} return={shown} steps/s={sps:,.0f}",
                refresh=False,
            )
        if len(self.returns) > 64:  # keep memory bounded
            for k in sorted(self.returns)[:-8]:
                self.returns.pop(k)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class TensorBoardWriter:
    """Optional TensorBoard event files beside the CSV (needs `tensorboardX`).

    One log folder per sweep setting (`<run>/tensorboard/<setting>`); each scalar is the
    mean over that setting's seeds, logged at the env step (per seed) of its iteration.
    """

    def __init__(self, logdir: Path, labels: Sequence[str]):
        from tensorboardX import SummaryWriter

        self.writers = [SummaryWriter(str(Path(logdir) / _safe(label))) for label in labels]

    def write(
        self, metrics: Mapping[str, np.ndarray], first_iteration: int, steps_per_iteration: int
    ) -> None:
        """Log iterations `first_iteration ...` of metrics `[settings x seeds, iters]`."""
        for name, values in metrics.items():
            per = values.reshape(len(self.writers), -1, values.shape[-1])
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                means = np.nanmean(per, axis=1)
            for writer, row in zip(self.writers, means, strict=True):
                for i, v in enumerate(row):
                    if math.isfinite(v):
                        step = (first_iteration + i + 1) * steps_per_iteration
                        writer.add_scalar(name, float(v), step)
        for writer in self.writers:
            writer.flush()

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "=.,-_" else "_" for c in label)
