"""The flock that keeps a second coordinator from writing an instance directory, and the
one way a held flock is given up (``lease``'s epochs use it too)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ambrosia_ic.errors import LockLostError

from .layout import LOCK_NAME

__all__ = ["InstanceLock", "release_flock"]


def release_flock(fd: int) -> int:
    """Give up the flock held on ``fd`` and close it (a negative ``fd`` holds nothing and is
    left alone). Unlocking first frees the lock even where another descriptor shares it (a
    child process that inherited it). Returns -1, what the holder keeps once it holds
    nothing: ``self._fd = release_flock(self._fd)``."""
    if fd >= 0:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return -1


class InstanceLock:
    """The exclusive lock of an instance directory. Standalone, it keeps a second
    coordinator from writing the same log; in active/active it will mark the primary."""

    def __init__(self, d: Path) -> None:
        self.path = d / LOCK_NAME
        self._fd = -1

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockLostError(
                f"another coordinator holds the log lock {self.path}"
            ) from None
        self._fd = fd

    def release(self) -> None:
        self._fd = release_flock(self._fd)
