"""Who may write a run folder: `DIR/.lock`, held by the one process that writes it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from rlax_trpo.errors import ConfigError

LOCK = ".lock"


class RunLock:
    """`DIR/.lock`, held with `fcntl.flock` by the one process that writes the run folder; its
    text names the holder (pid and host). The kernel releases the lock when the holder dies,
    so a crashed run never blocks the next one; a live one makes any second writer fail."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd

    @staticmethod
    def holder(folder: Path) -> str | None:
        """Who holds `folder`'s lock (e.g. `pid 123 on host-a`), or None; writes nothing."""
        import fcntl

        try:
            fd = os.open(folder / LOCK, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return (folder / LOCK).read_text(errors="replace").strip() or "another process"
        finally:
            os.close(fd)
        return None

    @classmethod
    def acquire(cls, folder: Path, flag: str = "--out") -> RunLock:
        """The lock of `folder` (which exists), or ConfigError naming its holder and `flag`,
        the option that named the folder (`--out`, or `--resume` for a resumed run)."""
        import fcntl

        path = folder / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.stat(path).st_ino:  # released and removed meanwhile
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            who = RunLock.holder(folder) or "another process"
            fresh = flag.lstrip("-") == "out"
            advice = "choose another folder" if fresh else "it continues this run"
            raise ConfigError(
                f"{flag}: {str(folder)!r} is being written by another run ({who}); wait for "
                f"it to end, or {advice}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        return cls(path, fd)

    def release(self) -> None:
        if self.fd is not None:  # once
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None
