"""Live reporting while a run goes: a tqdm progress bar fed from inside the compiled run, and
optional TensorBoard event files written after every chunk.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


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
