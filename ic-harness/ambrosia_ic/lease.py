"""Who is primary: epochs, the lease, fencing and the checkpointer role, all through
files in the instance directory (which may be shared storage).

- ``serverepoch<E>``: epoch E was claimed by one replica. It is created whole and at
  most once (written under a temporary name, then hard-linked: ``link`` fails if the
  name exists), so claiming epoch E+1 is an atomic compare-and-swap. Its content (JSON)
  says which replica holds it and its link port, so senders can find the primary.
- The holder keeps an exclusive ``flock`` on its epoch file for as long as it lives:
  the kernel drops it the moment the process dies (``kill -9``), so standbys see a
  crash within one poll. A process that is paused (SIGSTOP, a long GC, a hung disk)
  keeps its flock, so the holder also touches the file's mtime every ``HEARTBEAT``
  seconds: the lease. A standby takes over when the flock is free or the lease is
  older than ``LEASE`` seconds.
- Fencing: the primary of epoch E may write only while ``serverepoch<E+1>`` does not
  exist. It checks before and after every log write and every heartbeat; once fenced
  it stops (``LockLostError``) without acknowledging or delivering anything.
- ``servercheckpointer``: flock held by the checkpointing secondary.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from ambrosia_core.durable import fsync_dir, replace_durably
from ambrosia_ic.errors import LockLostError

from .logstore import file_numbers
from .logstore.lock import release_flock

__all__ = ["HEARTBEAT", "LEASE", "Epochs", "current_primary"]

EPOCH_PREFIX = "serverepoch"
CHECKPOINTER_LOCK = "servercheckpointer"
UPGRADED_MARK = "serverupgraded"
HEARTBEAT = 0.05
LEASE = 0.5


def epoch_path(d: Path, e: int) -> Path:
    return d / f"{EPOCH_PREFIX}{e}"


def current_epoch(d: Path, hint: int = 0) -> int:
    """The newest claimed epoch (0: none). ``hint`` is one known to exist."""
    e = hint
    if e == 0:
        nums = file_numbers(d, EPOCH_PREFIX)
        e = nums[-1] if nums else 0
    while epoch_path(d, e + 1).exists():
        e += 1
    return e


def read_epoch(d: Path, e: int) -> dict[str, Any]:
    try:
        data = json.loads(epoch_path(d, e).read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def current_primary(d: Path) -> dict[str, Any]:
    """What the newest epoch file says (replica, ic_port, ...); {} if none."""
    e = current_epoch(d)
    return read_epoch(d, e) if e else {}


class Epochs:
    """One replica's view of the epochs of one instance directory."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.known = 0
        self.held: int | None = None
        self._fd = -1
        self._ckpt_fd = -1

    # ------------------------------------------------------------------ reading
    def current(self) -> int:
        self.known = current_epoch(self.dir, self.known)
        return self.known

    def holder_gone(self, e: int) -> bool:
        """True if epoch ``e``'s holder died (its flock is free) or its lease ran out."""
        path = epoch_path(self.dir, e)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return time.time() - os.fstat(fd).st_mtime > LEASE
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ holding
    def claim(self, e: int, info: dict[str, Any]) -> bool:
        """Try to become the holder of epoch ``e``; False if another replica did."""
        path = epoch_path(self.dir, e)
        tmp = self.dir / f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, json.dumps({**info, "epoch": e, "pid": os.getpid()}).encode())
            os.fsync(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)  # held through the link: same inode
            try:
                os.link(tmp, path)
            except FileExistsError:
                os.close(fd)
                return False
        finally:
            os.unlink(tmp)
        fsync_dir(self.dir)
        self.release()
        self._fd = fd
        self.held = e
        self.known = max(self.known, e)
        return True

    def fenced(self) -> bool:
        assert self.held is not None
        return epoch_path(self.dir, self.held + 1).exists()

    def check(self) -> None:
        """Raises LockLostError if a newer epoch was claimed."""
        if self.held is not None and self.fenced():
            raise LockLostError(
                f"{self.dir}: epoch {self.held + 1} was claimed by another replica; "
                f"this primary (epoch {self.held}) was fenced off and stops without writing"
            )

    def beat(self) -> None:
        """Renew the lease, then make sure it still means something."""
        if self.held is not None:
            os.utime(epoch_path(self.dir, self.held))
            self.check()

    def release(self) -> None:
        self._fd = release_flock(self._fd)

    # ------------------------------------------------------------------ checkpointer
    def try_checkpointer(self) -> bool:
        fd = os.open(self.dir / CHECKPOINTER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._ckpt_fd = fd
        return True

    def close(self) -> None:
        self.release()
        if self._ckpt_fd >= 0:
            os.close(self._ckpt_fd)
            self._ckpt_fd = -1

    # ------------------------------------------------------------------ upgrade
    def mark_upgraded(self, version: int) -> None:
        replace_durably(self.dir / UPGRADED_MARK, str(version).encode())

    def upgraded_to(self) -> int | None:
        try:
            return int((self.dir / UPGRADED_MARK).read_text())
        except (OSError, ValueError):
            return None
