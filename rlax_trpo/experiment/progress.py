"""While a run goes: a tqdm progress bar fed from inside the compiled run, and the signal
handler that stops a chunked run between chunks (the loggers that write event files and
W&B runs between chunks are in `rlax_trpo.experiment.loggers`).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from rlax_trpo.errors import RunFailed


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


class Interrupted(KeyboardInterrupt):
    """A signal that stopped a run before it began (`StopRequest`); `signum` names it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """SIGINT/SIGTERM while a run goes: the first asks it to stop after the current call
    (seconds of work; a single-call run's whole call) and its checkpoint; a second stops it
    now.

    Until `begin` (the driver calls it once the run is planned, built and placed, before it
    makes the run folder) nothing is written and nothing would be kept, so the first signal
    stops the run at once: the handler raises `Interrupted` wherever the main thread is
    (planning, tracing; a native call such as a compilation returns first), and leaving the
    context turns it into one line, `RunFailed` with exit status 128 + signal.

    After `begin` the handlers only set a flag, read between chunks. A thread woken by
    `signal.set_wakeup_fd` sees each signal at once, even while the main thread waits in a
    compiled call (Python runs its own handlers only between bytecodes): it prints the
    acknowledgement at once and, with `hard=True` (the command line), ends the process on
    the second signal with one line saying what `kept()` (set by the driver) reports and
    exit status 128 + signal. With `hard=False` (the Python API, notebooks) the previous
    handlers are back after the first signal, so a second Ctrl-C raises KeyboardInterrupt.
    Outside the main thread nothing is installed.
    """

    def __init__(self, hard: bool = False, single_call: bool = False) -> None:
        self.signum: int | None = None
        self.immediate = True  # before `begin`: a signal stops the run at once
        self.hard = hard
        self.single_call = single_call
        self.kept: Callable[[], str] = lambda: "nothing was kept"
        self.previous: dict[int, Any] = {}
        self._seen = 0
        self._pipe: tuple[int, int] | None = None
        self._previous_fd: int | None = None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        self._watcher = threading.Thread(target=self._watch, args=(read,), daemon=True)
        self._watcher.start()
        return self

    def begin(self) -> None:
        """From now on (the run folder is about to be made) a first signal stops the run
        after its current chunk and checkpoint, no longer at once."""
        self.immediate = False

    def _handle(self, signum: int, frame: Any) -> None:
        """The Python-level handler (main thread, between bytecodes); the watcher speaks."""
        if self.signum is None:
            self.signum = signum
        if not self.hard:
            self._restore_handlers()
        if self.immediate:
            raise Interrupted(signum)

    def _watch(self, read: int) -> None:
        while True:
            try:
                data = os.read(read, 64)
            except OSError:
                data = b""
            if not data:
                os.close(read)
                return
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._received(signum)

    def _received(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self._seen += 1
        if self._seen == 1 and self.immediate:
            return  # the main thread stops and says so (`Interrupted`)
        if self._seen == 1:
            if self.signum is None:
                self.signum = signum
            when = (
                "when its compiled call ends (--single-call), then saving its checkpoint"
                if self.single_call
                else "after the current call (seconds), with a checkpoint and its files"
            )
            print(
                f"{_line_start()}{name} received: stopping {when} (send it again to stop now)",
                file=sys.stderr,
                flush=True,
            )
            return
        if self.hard:
            try:
                kept = self.kept()
            except Exception:  # noqa: BLE001 - on the way out; the line must still come
                kept = "see the run folder"
            print(
                f"{_line_start()}error: stopped by a second {name}; {kept}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signum)

    def _restore_handlers(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._pipe is not None:
            self._restore_handlers()
            signal.set_wakeup_fd(self._previous_fd if self._previous_fd is not None else -1)
            read, write = self._pipe
            self._pipe = None
            os.close(write)  # the watcher reads end-of-file and returns
            self._watcher.join(timeout=5)
        if isinstance(exc, Interrupted):
            raise RunFailed(
                f"interrupted by {exc} before the run began; nothing was written",
                status=128 + exc.signum,
            ) from None


def _line_start() -> str:
    """A newline that ends a progress bar's line before a message, or nothing when no bar is
    drawn (then the message is the first thing on its line)."""
    import tqdm

    return "\n" if any(not bar.disable for bar in list(tqdm.tqdm._instances)) else ""
