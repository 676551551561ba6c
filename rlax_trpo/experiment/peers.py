"""Multi-process runs when a peer fails: a bounded wait, one line, no native stack.

JAX's distributed runtime reacts to a missing or dead peer from its own C++ threads: it logs
the coordination service's errors and aborts the process with a C++ stack (or a Gloo
collective fails first, followed by more native messages at exit). Neither reaches Python
in a form that can be turned into one line. So `rlax-trpo train` with `--num-processes`
runs the training in a child process (its own process group) and supervises it:

- the child's Python-level output (progress bar, messages, tracebacks of real defects) goes
  to the user's stderr through an inherited file descriptor; the child's native stderr
  (the runtime's logs, any C++ stack) goes to a log file in the temporary directory;
- SIGINT and SIGTERM sent to the parent are forwarded to the child (which stops after the
  current chunk, as a single-process run does; a second one stops it at once);
- when the child ends by a signal (the runtime's abort), the parent prints one line naming
  the cause and the log file, and exits with status 3 (the surroundings failed).

`--peer-timeout S` (default 60) is how long a process may go without a heartbeat before the
run counts it dead, so a surviving process ends within about S seconds of a peer's death (a
killed peer is usually seen sooner, when its TCP connections close). `--startup-timeout S`
(default 600) is how long a live process is waited for where the processes meet: joining,
after compiling (they compile at their own pace) and at shutdown
(`rlax_trpo.experiment.parallel`).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlax_trpo.errors import ConfigError, is_peer_failure
from rlax_trpo.experiment import record as run_record

CHILD_ENV = "RLAX_TRPO_USER_STDERR"  # set in the supervised child: the user's stderr fd


_adopted: list[bool] = []


def check_args(args: Any) -> bool:
    """--coordinator-address HOST:PORT, --num-processes N and --process-id I together (a
    cluster that JAX detects by itself needs none of them), and `--peer-timeout` only with
    them; whether the run is multi-process. Bad input: one-line ConfigError."""
    address, n, i = args.coordinator_address, args.num_processes, args.process_id
    cluster = ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "TPU_WORKER_HOSTNAMES", "CLOUD_TPU_TASK_ID")
    if n is not None and n > 1 and address is None and not any(v in os.environ for v in cluster):
        raise ConfigError(
            "--num-processes: a multi-process run needs --coordinator-address HOST:PORT"
        )
    if address is not None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"--coordinator-address: expected HOST:PORT with a port from 1 to 65535 "
                f"(got {address!r})"
            )
        if n is None or i is None:
            raise ConfigError("--coordinator-address: give --num-processes and --process-id too")
    if n is not None and i is not None and not 0 <= i < n:
        raise ConfigError(f"--process-id: must be from 0 to {n - 1} (got {i})")
    for flag, value in (
        ("--peer-timeout", args.peer_timeout),
        ("--startup-timeout", args.startup_timeout),
    ):
        if address is None and n is None and value is not None:
            raise ConfigError(f"{flag}: only for a multi-process run (--num-processes)")
    return address is not None or n is not None


def join(args: Any) -> None:
    """`jax.distributed.initialize` with the command line's values; a coordinator that
    cannot be reached or JAX's own checks: one-line ConfigError."""
    from rlax_trpo.experiment import parallel

    try:
        parallel.initialize_distributed(
            args.coordinator_address,
            args.num_processes,
            args.process_id,
            peer_timeout=args.peer_timeout or parallel.PEER_TIMEOUT,
            startup_timeout=args.startup_timeout or parallel.STARTUP_TIMEOUT,
        )
    except (ValueError, RuntimeError) as err:  # JAX's own checks, and a coordinator not found
        first = next((x for x in str(err).splitlines() if x.strip()), type(err).__name__)
        raise ConfigError(f"--coordinator-address: cannot join the run: {first[:200]}") from None


def in_supervised_child() -> bool:
    """Whether this process is the training child of a supervised multi-process run."""
    return bool(_adopted) or CHILD_ENV in os.environ


def adopt_user_stderr() -> None:
    """In the supervised child, first thing: Python writes to the user's stderr; fd 2 (the
    native runtime's messages) and Python logging stay on the log file."""
    fd, parent = (int(x) for x in os.environ.pop(CHILD_ENV).split(","))
    _adopted.append(True)
    _die_with(parent)
    sys.stderr = open(fd, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    # Libraries' Python logging (orbax's background threads, absl) joins the native log.
    native = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    logging.basicConfig(stream=native, level=logging.WARNING)


def _die_with(parent: int) -> None:
    """The child is killed when its supervisor dies (kill -9 of the command the user ran
    ends the training too): Linux's PR_SET_PDEATHSIG, where available."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
    if os.getppid() != parent:  # the supervisor died before that took effect
        os._exit(3)


def supervise(argv: list[str], prog: str, process_id: int | None, folder: Path | None) -> int:
    """Run `train argv` in a supervised child process; its exit status, or 3 with one line
    when the child was ended by a signal (the distributed runtime's abort)."""
    log = Path(tempfile.gettempdir()) / f"rlax-trpo-process{process_id}-{os.getpid()}.log"
    user = os.dup(2)
    # The folder holding the package rlax_trpo/ (never the package's own folder: its
    # types.py would shadow the standard library's in the child).
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        CHILD_ENV: f"{user},{os.getpid()}",
        "PYTHONPATH": package_root + (os.pathsep + path if path else ""),
    }
    code = "import sys; from rlax_trpo.cli import main; sys.exit(main(sys.argv[2:], sys.argv[1]))"
    with open(log, "wb") as native:
        child = subprocess.Popen(
            [sys.executable, "-c", code, prog, "train", *argv],
            env=env,
            stderr=native,
            pass_fds=(user,),
            process_group=0,
        )
    os.close(user)

    def forward(signum: int, frame: object) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if status >= 0:  # the child said what went wrong itself, if anything did
        log.unlink(missing_ok=True)
        return status
    name = signal.Signals(-status).name
    text = log.read_text(errors="replace")
    cause = (
        "a process of this multi-process run stopped or cannot be reached (the distributed "
        "runtime gave up on it within --peer-timeout or --startup-timeout)"
        if is_peer_failure(text)
        else f"the training process ended by {name}"
    )
    print(f"error: {cause}; {_kept(folder)}; its native messages: {log}", file=sys.stderr)
    return 3


def _kept(folder: Path | None) -> str:
    """What process 0's run folder holds (as seen from this host)."""
    if folder is None:
        return "process 0's run folder keeps its last checkpoint, if one was saved"
    steps = run_record.saved_steps(folder / "checkpoint")
    if steps:
        return (
            f"the run folder {str(folder)!r} keeps its last checkpoint {steps[0].name} "
            "(--resume continues it)"
        )
    if run_record.has_step(folder / "checkpoint"):
        return f"the run folder {str(folder)!r} keeps its last checkpoint (--resume continues it)"
    if run_record.has_plan(folder / "checkpoint"):
        return f"the run folder {str(folder)!r} has no checkpoint yet (--resume starts it over)"
    return "nothing was kept"
