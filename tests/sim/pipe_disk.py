"""The simulated disk under the real 2PC file sink (``FileSinkStore``) in ``pipe_world``.

The store keeps its files in a real directory (in memory where the machine has it) and
calls ``os`` as it always does; while a pipeline world runs, the store module's ``os``
and ``fsync_dir`` are this disk's, which pass every call through and remember what each
file held when it was last synced and which names the directory had when it was last
synced. A crash then does what a power cut may do: a file created since the directory's
last sync is gone; every other file goes back to what it held at its last sync, or keeps
all that was written since, or (when only appended to) a prefix of it.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ambrosia_services.connectors.clients import sinkstore

__all__ = ["SinkCrash", "SinkDisk", "sink_disk"]


class SinkCrash(Exception):  # noqa: N818 (not an error: the power cut a run asked for)
    """The sink's process dies here (at a step or a disk call it was armed to crash at)."""


class SinkDisk:
    """The ``os`` of the sink stores (one directory each): every call passes through;
    syncs are remembered."""

    def __init__(self) -> None:
        self.synced: dict[Path, bytes] = {}  # file -> what it held at its last fsync
        self.entries: dict[Path, set[str]] = {}  # directory -> names at its last sync
        self._fds: dict[int, Path] = {}  # open descriptor -> file
        self.crash_in: int | None = None  # the power goes before this many more calls
        # What crashes did to files with unsynced writes: created files lost, files
        # back to their last sync, files cut inside what was appended since.
        self.fates: dict[str, int] = {"lost": 0, "reverted": 0, "torn": 0, "kept": 0}

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    # ---------------------------------------------------------------- the calls kept
    def _call(self) -> None:
        """Before each call that changes the disk: the power goes if it was armed to."""
        if self.crash_in is not None:
            self.crash_in -= 1
            if self.crash_in <= 0:
                self.crash_in = None
                raise SinkCrash("a disk call")

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_CREAT:
            self._call()
        fd = os.open(path, flags, mode)
        self._fds[fd] = Path(path)
        return fd

    def close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        os.close(fd)

    def write(self, fd: int, data: Any) -> int:
        self._call()
        return os.write(fd, data)

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        self._call()
        return os.pwrite(fd, data, offset)

    def ftruncate(self, fd: int, length: int) -> None:
        self._call()
        os.ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        self._call()
        os.fsync(fd)
        path = self._fds[fd]
        self.synced[path] = path.read_bytes()

    def fsync_dir(self, directory: Any) -> None:
        self._call()
        self.entries[Path(directory)] = {p.name for p in Path(directory).iterdir()}

    def close_all(self) -> None:
        """Close every descriptor still open (the stores of a world that ended)."""
        for fd in list(self._fds):
            self.close(fd)

    # ---------------------------------------------------------------- the crash
    def crash(self, directory: Path, rng: random.Random) -> None:
        """The power of the sink in ``directory`` is cut: its descriptors close (the lock
        goes) and its unsynced writes go as a real disk may lose them."""
        self.crash_in = None
        for fd, path in list(self._fds.items()):
            if path.parent == directory:
                self.close(fd)
        entries = self.entries.get(directory, set())
        for path in sorted(directory.iterdir()):
            if path.name not in entries:
                path.unlink()
                self.synced.pop(path, None)
                self.fates["lost"] += 1
                continue
            now, kept = path.read_bytes(), self.synced.get(path, b"")
            if now == kept:
                continue
            fate = rng.random()
            if fate < 0.4:
                path.write_bytes(kept)
                self.fates["reverted"] += 1
            elif fate < 0.7 and now.startswith(kept) and len(now) > len(kept) + 1:
                path.write_bytes(now[:rng.randrange(len(kept) + 1, len(now))])
                self.fates["torn"] += 1
            else:  # all that was written reached the disk
                self.fates["kept"] += 1
            self.synced[path] = path.read_bytes()


@contextlib.contextmanager
def sink_disk(disk: SinkDisk) -> Iterator[None]:
    """Run the store module on ``disk`` (its ``os`` and ``fsync_dir``) for a while."""
    saved = sinkstore.os, sinkstore.fsync_dir
    sinkstore.os, sinkstore.fsync_dir = disk, disk.fsync_dir  # type: ignore[assignment]
    try:
        yield
    finally:
        sinkstore.os, sinkstore.fsync_dir = saved
