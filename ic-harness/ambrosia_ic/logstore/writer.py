"""Writing a log file: records at its end, each write made durable by a sync, with a
region of zeros kept ahead of the end so that most syncs flush data only."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_REGION", "LogWriter"]

#: How far ahead of its end a log writer keeps zeros written and synced: the cost of
#: filling and syncing them is paid once per region, and the commits in between each save
#: the journal commit an append's sync pays (measured: bench/README.md).
DEFAULT_REGION = 1 << 20
_PAGE = 4096


class LogWriter:
    """Writes records to one log file. ``write`` and ``sync`` block: call them off the
    event loop (the coordinator's committer does, so group commit pays one fsync per batch).

    With a ``region`` (bytes), the writer keeps that much space past its end filled
    with zeros and synced, and writes each record into it at its own end (``size``, the
    logical size; the file is longer). An append changes the file's size, and ext4 then
    commits its journal in every sync; an overwrite of synced zeros syncs only the data,
    which costs less (bench/README.md). The zeros are written and synced once per region,
    when a record reaches them. Without a region, records
    are appended.

    ``trim`` cuts the zeros off (and syncs): a writer moving on to the next log calls it
    first, so an older log ends at its last record. ``close`` trims unless the writer
    was made with ``trim_on_close=False`` (an active/active primary, whose followers
    read the file through a map that a shrinking file would fault).

    Args:
        truncate_at: cut an existing file to this size first (a recovery cutting a torn
            tail).
        exclusive: an active/active primary starting a log must be its only creator.
        region: bytes of zeros kept ahead of the end (0: append).
    """

    def __init__(self, path: Path, truncate_at: int | None = None,
                 exclusive: bool = False, *, region: int = 0,
                 trim_on_close: bool = True) -> None:
        if region < 0:
            raise ValueError(f"a log region of {region} bytes")
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else 0)
        self._fd = os.open(path, flags, 0o644)
        if truncate_at is not None:
            os.ftruncate(self._fd, truncate_at)
            os.fsync(self._fd)
        self.size = os.lseek(self._fd, 0, os.SEEK_END)
        self.region = region
        self._reserved = self.size  # where the zeros written ahead end
        self._trim_on_close = trim_on_close
        self._synced = False
        self._failed: OSError | None = None

    def write(self, data: bytes) -> None:
        """Write one record at the end. After a write that failed (a full disk) the writer
        writes nothing more: its record may be in the file whole or in part, and the same
        record written again after it would stand twice (a log that no longer recovers)."""
        if self._failed is not None:
            raise OSError(self._failed.errno, f"{self.path}: an earlier write failed "
                          f"({self._failed.strerror or self._failed}); nothing more is "
                          "written to this log", str(self.path))
        try:
            self._write(data)
        except OSError as err:
            self._failed = err
            raise

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        end = self.size + len(data)
        if not self.region:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self.size = end
            return
        at = self.size
        while view:
            n = os.pwrite(self._fd, view, at)
            view = view[n:]
            at += n
        self.size = end
        if end >= self._reserved:  # at least one zero byte stays past the end
            self._extend()

    def _extend(self) -> None:
        """Zeros from the end (or from where they end) up to a region past the end,
        then an fsync: the record just written is durable with them, and the file's
        new size too, so the following commits sync data only."""
        start = max(self._reserved, self.size)
        stop = -(-(self.size + self.region) // _PAGE) * _PAGE
        zeros = bytes(min(self.region, stop - start))
        at = start
        while at < stop:
            at += os.pwrite(self._fd, memoryview(zeros)[: stop - at], at)
        os.fsync(self._fd)
        self._synced = True
        self._reserved = stop

    def sync(self) -> None:
        """Make what was written durable. The first sync of a writer is an fsync (all of
        the file's metadata); later ones are fdatasyncs, which still flush the file's
        size (appends need nothing else) but skip its times: a commit's fsync is on
        the round trip's path, and this measured cheaper per sync (bench/README.md)."""
        if self._synced:
            os.fdatasync(self._fd)
        else:
            os.fsync(self._fd)
            self._synced = True

    def trim(self) -> None:
        """Cut the zeros past the end off, durably (nothing if there are none)."""
        if self._fd >= 0 and self._reserved > self.size:
            os.ftruncate(self._fd, self.size)
            os.fsync(self._fd)
            self._reserved = self.size

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            if self._trim_on_close:
                self.trim()
        finally:
            os.close(self._fd)
            self._fd = -1
