"""The run's log: the libraries' own messages kept off the terminal, in `<run>/run.log`.

`rlax-trpo train` speaks in its own lines: the progress bar, the outcome, one line for a
failure. The libraries under it speak too, and at a fault they speak at length: absl and
orbax log through Python's `logging` (from their threads, with tracebacks), asyncio reports
futures nobody awaited, threads end with tracebacks, they warn, and the native runtime
(XLA, Gloo, tensorstore) writes to file descriptors 2 and 1 (Gloo's connection lines).
Unless `--verbose`, the command sends all of that to a log file (`quiet_libraries`):
Python's `sys.stdout` and `sys.stderr` stay on the terminal (duplicates of its
descriptors), descriptors 1 and 2 and the Python handlers go to the log. Until the run
folder exists the log is a temporary file; `attach` moves it into the folder, where it grows
across `--resume`s. A log never attached (bad input, a run that kept nothing) is removed at
the end.

In a supervised multi-process child (`rlax_trpo.experiment.peers`) descriptor 2 is already
the supervisor's log, which it reads to name the cause of a failure: there everything goes
to that log.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TextIO

RUN_LOG = "run.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Handler(logging.StreamHandler):
    """A handler that never speaks about itself: a log it cannot write (a full disk) is
    given up silently, not reported on the terminal."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        pass


class _Diversion:
    """What `quiet_libraries` changed, to be put back: descriptors 1 and 2, `sys.stdout` and
    `sys.stderr`, the root logger's handlers, the hooks of threads, unraisable exceptions and
    warnings."""

    def __init__(self, own_log: bool) -> None:
        # The log until `attach`: an anonymous file (no name in the temporary folder), so a
        # process killed before it has a run folder leaves nothing behind.
        self.pending: IO[bytes] | None = None
        self.attached = False  # a run folder was made: the libraries have run
        # own_log: descriptor 2 is ours to point at a log (not a supervisor's already)
        log = tempfile.TemporaryFile(prefix="rlax-trpo-", suffix=".log") if own_log else None
        self.saved = {fd: os.dup(fd) for fd in (1, 2)}  # the terminal's
        self.streams: dict[str, TextIO] = {}  # Python's streams replaced
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            stream.flush()
            if _fileno(stream) == fd:  # Python's own output stays on the terminal
                self.streams[name] = stream
                copy = open(os.dup(fd), "w", buffering=1, errors="backslashreplace")  # noqa: SIM115
                setattr(sys, name, copy)
        if log is not None:
            os.dup2(log.fileno(), 2)
            self.pending = log
        os.dup2(2, 1)  # the native stdout (Gloo's connection lines) joins the log
        self.stream = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
        handler = _Handler(self.stream)
        handler.setFormatter(logging.Formatter(FORMAT))
        root = logging.getLogger()
        self.handlers = root.handlers[:]
        root.handlers = [handler]
        self.excepthook = threading.excepthook
        self.unraisablehook = sys.unraisablehook
        threading.excepthook = _log_thread_exception
        sys.unraisablehook = _log_unraisable
        self.showwarning = warnings.showwarning
        warnings.showwarning = functools.partial(_show_warning, self.showwarning)

    def attach(self, folder: Path) -> None:
        """The log moved into `folder` (appended to one a previous attempt left)."""
        self.attached = True
        if self.pending is None:
            return
        self.stream.flush()
        try:
            fd = os.open(folder / RUN_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                pending = self.pending.fileno()
                os.write(fd, os.pread(pending, os.fstat(pending).st_size, 0))
                os.dup2(fd, 2)
                os.dup2(fd, 1)
            finally:
                os.close(fd)
        except OSError:  # the folder cannot take it: the temporary log goes on
            return
        self.pending.close()
        self.pending = None

    def settle(self) -> None:
        """The run is over but the process goes on to its end, diverted: a log never
        attached is removed now (what is still said is lost with it)."""
        if self.pending is not None:
            self.pending.close()
            self.pending = None

    def restore(self) -> None:
        # What the libraries left unreachable speaks when finalised (asyncio's "Future
        # exception was never retrieved" of a failed write): now, into the log. Only after a
        # run began: a command refused before (bad input) skips the collection, which costs
        # 0.2-0.5 s in a process holding JAX's objects.
        if self.attached:
            gc.collect()
        self.stream.flush()
        warnings.showwarning = self.showwarning
        threading.excepthook = self.excepthook
        sys.unraisablehook = self.unraisablehook
        logging.getLogger().handlers = self.handlers
        self.stream.close()
        for name, stream in self.streams.items():
            getattr(sys, name).close()
            setattr(sys, name, stream)
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        if self.pending is not None:  # never attached to a run folder
            self.pending.close()


_active: list[_Diversion] = []


@contextlib.contextmanager
def quiet_libraries(quiet: bool = True, to_the_end: bool = False) -> Iterator[None]:
    """Within it (when `quiet`), the libraries' messages go to the run's log; everything is
    put back at its end, unless `to_the_end` (the command is the whole process: what the
    libraries leave behind still speaks as the interpreter ends, e.g. asyncio's "Future
    exception was never retrieved" of a failed checkpoint write)."""
    if not quiet or _active:
        yield
        return
    from rlax_trpo.experiment import peers

    try:
        diversion = _Diversion(own_log=not peers.in_supervised_child())
    except OSError:  # no temporary file to be had: the messages stay where they were
        yield
        return
    _active.append(diversion)
    try:
        yield
    finally:
        if to_the_end:
            diversion.settle()
        else:
            _active.pop().restore()


def attach(folder: Path) -> None:
    """The run folder now exists: the log of `quiet_libraries` (if any) moves into it."""
    if _active:
        _active[-1].attach(folder)


def _log_thread_exception(args: Any) -> None:
    if args.exc_type is SystemExit:
        return
    exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("rlax_trpo").error("exception in thread %s", name, exc_info=exc_info)


def _log_unraisable(unraisable: Any) -> None:
    exc_info = (unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)
    message = unraisable.err_msg or "exception ignored"
    logging.getLogger("rlax_trpo").error("%s: %r", message, unraisable.object, exc_info=exc_info)


PACKAGE = Path(__file__).resolve().parents[1]


def _show_warning(show: Any, message, category, filename, lineno, file=None, line=None) -> None:
    """A warning from this package is shown as before (a defect of ours, seen and recorded
    by tests); the libraries' go to the log."""
    if Path(filename).resolve().is_relative_to(PACKAGE):
        show(message, category, filename, lineno, file, line)
        return
    text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
    logging.getLogger("py.warnings").warning("%s", text)


def _fileno(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
