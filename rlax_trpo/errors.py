"""Exceptions raised for bad user input; the CLI prints them on one line and exits 2."""

import contextlib
import contextvars
import re
from collections.abc import Iterator

# What the distributed runtime writes when a peer or the coordinator is gone.
PEER_FAILURE = re.compile(
    r"stopped sending heartbeats|coordination service|CoordinationService|Gloo[^\n]*failed|"
    r"Connection reset by peer|Connection closed by peer|Socket closed|heartbeat|\bbarrier\b",
    re.IGNORECASE,
)


# Whether messages name a run's arguments as the command line's options (`--seeds`) or as
# `rlax_trpo.run`'s keyword arguments (`seeds`): the command line sets it for its own calls.
_OPTION_NAMES = contextvars.ContextVar("rlax_trpo_option_names", default=False)


def arg(name: str) -> str:
    """A run's argument `name` (`seeds`, `chunk_iterations`) as its caller wrote it: the
    option `--chunk-iterations` under the command line, else the keyword `chunk_iterations`."""
    return "--" + name.replace("_", "-") if _OPTION_NAMES.get() else name


def arg_value(name: str, value: object) -> str:
    """`--resume runs/x` under the command line, else `resume='runs/x'`."""
    return f"{arg(name)} {value}" if _OPTION_NAMES.get() else f"{name}={str(value)!r}"


@contextlib.contextmanager
def option_names() -> Iterator[None]:
    """Within it, messages name the command line's options (`arg`)."""
    token = _OPTION_NAMES.set(True)
    try:
        yield
    finally:
        _OPTION_NAMES.reset(token)


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range.

    The message is one line that names the key and what is allowed.
    """


class UsageError(ValueError):
    """A command line that does not parse or combines options wrongly: one line, exit 2."""


class RunFailed(RuntimeError):
    """A run stopped by its surroundings, not by its input: disk full, permissions, memory,
    a second Ctrl-C. The message is one line naming the cause and what was kept; `status`
    is the exit status (3; 130 for an interrupt)."""

    def __init__(self, message: str, status: int = 3) -> None:
        super().__init__(message)
        self.status = status


def describe_failure(err: BaseException, where: str) -> BaseException | None:
    """The one-line error a run's failure `err` becomes (`where`: one clause saying what the
    run folder keeps, or "nothing was kept"), or None when it is a defect to show with its
    traceback."""
    import errno

    if isinstance(err, KeyboardInterrupt):
        return RunFailed(f"interrupted; {where}", status=130)
    text = str(err)
    runtime = type(err).__name__ in ("JaxRuntimeError", "XlaRuntimeError", "CheckpointWriteError")
    if runtime and is_peer_failure(text) and _multi_process():
        first = next((line for line in text.splitlines() if line.strip()), "")
        during = (
            "while writing a checkpoint"
            if type(err).__name__ == "CheckpointWriteError"
            else first.strip()[:160]
        )
        return RunFailed(
            f"a process of this multi-process run stopped or cannot be reached ({during}); {where}"
        )
    if type(err).__name__ == "CheckpointWriteError":
        return RunFailed(text)
    if isinstance(err, OSError) and err.errno in (
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.EIO,
    ):
        name = f": {err.filename}" if err.filename else ""
        return RunFailed(f"{err.strerror}{name}; {where}")
    if "RESOURCE_EXHAUSTED" in text and ("memory" in text.lower() or "allocat" in text.lower()):
        first = next((line for line in text.splitlines() if "RESOURCE_EXHAUSTED" in line), "")
        return RunFailed(
            f"out of memory on the device ({first.strip()[:160]}): use fewer num_envs, num_steps, "
            f"epochs (num_epochs, value_epochs), seeds or settings; {where}"
        )
    return None


def _multi_process() -> bool:
    import jax

    return jax.process_count() > 1


def is_peer_failure(text: str) -> bool:
    """Whether an error's text is the distributed runtime's report of a lost peer."""
    return bool(PEER_FAILURE.search(text))
