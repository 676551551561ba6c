"""While a run goes: a tqdm progress bar fed from inside the compiled run, and the signal
handler that stops a chunked run between chunks (the loggers that write event files and
W&B runs between chunks are in `rlax_trpo.loggers`).
"""

from __future__ import annotations

import math
import signal
import sys
import threading
from typing import Any

import numpy as np


class ProgressBar:
    """A tqdm bar fed from inside the compiled run by `jax.debug.callback`.

    The callback may fire once per member per iteration (under vmap), out of order and, when
    the population is sharded over devices, on several threads at once (a lock makes each
    call whole: one bar, each iteration counted once). The bar shows the furthest iteration
    reached, the latest mean return reported for it, the ETA, and env steps/s over the whole
    population. `start` is the iteration a resumed run begins at.
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
        self._lock = threading.Lock()

    def __call__(self, iteration: Any, latest_return: Any) -> None:
        with self._lock:
            self._report(int(iteration) + 1, float(latest_return))

    def _report(self, it: int, ret: float) -> None:
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
        with self._lock:
            if self.bar is not None:
                self.bar.close()


class StopRequest:
    """SIGINT/SIGTERM handlers that only set a flag, checked between chunks.

    The first signal asks the run to stop after the current chunk and its checkpoint; the
    default handlers are restored at once, so a second signal stops the process immediately.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        self.__exit__()
        name = signal.Signals(signum).name
        print(f"\n{name} received: stopping after the current chunk and its checkpoint (send it "
              "again to stop now)", file=sys.stderr, flush=True)  # fmt: skip

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
