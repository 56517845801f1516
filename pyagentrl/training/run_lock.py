"""One writer per run directory: ``<run>/.lock``, held (``flock``) by the process that trains the run.

Two processes writing one run (a second ``train --resume`` while the first still runs) would interleave their
metrics lines and prune each other's checkpoints. The lock is the kernel's, so a process that dies for any reason
releases it: a killed run resumes without clean-up.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class RunLocked(RuntimeError):
    """The run directory is held by another process (the message names it)."""


class RunLock:
    """Holds ``<run_dir>/.lock`` until :meth:`release` or the process ends; raises :class:`RunLocked` when another
    process holds it."""

    def __init__(self, run_dir: Path) -> None:
        path = run_dir / LOCK_FILE
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            self._fd = None
            raise RunLocked(
                f"{run_dir} is being written by another process (pid {holder}): wait for it to end or stop it, then "
                "resume"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
