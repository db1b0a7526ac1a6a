"""The 2PC file sink's durable state: a directory that never shows uncommitted bytes.

The directory holds:

- ``committed``: the committed output, byte for byte; nothing else ever reaches it.
- ``pending.<B>``: bytes written after the committed offset, not yet committed; its
  first byte is output offset ``B`` (at most one such file lives after recovery).
- ``txnlog``: an append-only log of 2PC decisions. Each record is
  ``U32 n | body (n bytes) | U64 xxh64(U32 n | body)``, big-endian, where the body is
  ``U8 kind | U16 length + txn id (UTF-8) | U64 start | U64 end`` and kind is
  1 PREPARE (Phase1 voted yes), 2 COMMIT (Phase2 commit decided), 3 ABORT (a prepared
  transaction aborted). Recovery reads records up to the first one cut short or failing
  its check bytes at the end of the file (a torn last write) and truncates the log
  there; a damaged record followed by more records is corruption and refused.
- ``lock``: held (flock) while a sink uses the directory.

Order of writes, so that a kill -9 at any point loses no committed byte and duplicates
none: a yes vote fsyncs the pending file (and the directory when a file was created)
before the PREPARE record, and fsyncs the log before the vote is answered. A commit
fsyncs its COMMIT record first, then copies the range from the pending file to
``committed`` at the committed offset and fsyncs it. Recovery compares the size of
``committed`` with the last COMMIT's end and copies whatever is missing again, so the
copy is idempotent; bytes written but never prepared are dropped.

All I/O here is blocking and synchronous, also in the store's async methods (the
interface's, which the PostgreSQL store needs): the sink serves one connection at a time
and answers nothing before its writes are durable anyway.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from ambrosia_core.durable import fsync_dir, make_dirs

from .errors import SinkStateError, SinkStoreCorruptError
from .sinkport import DATA_STREAM_ID, Prepared, SinkStore, Vote
from .txnlog import TxnLogKind, TxnLogRecord, decode_txnlog

__all__ = ["DATA_STREAM_ID", "FileSinkStore", "Prepared", "Vote"]

_COPY_CHUNK: Final = 1 << 20

log = logging.getLogger(__name__)


class FileSinkStore(SinkStore):
    """The sink's output and 2PC state in ``directory``, recovered on construction.

    Args:
        directory: created if missing.
        on_step: called with the name of each durable step just taken
            ("pending-synced", "prepare-logged", "commit-logged", "commit-applied",
            "abort-logged"); tests use it to crash the sink between steps.

    Raises:
        SinkStoreCorruptError: the directory cannot be trusted (see the module docstring).
        BlockingIOError: another sink holds the directory.
    """

    def __init__(self, directory: Path, *, on_step: Callable[[str], None] | None = None) -> None:
        self.directory = directory
        self._on_step = on_step or (lambda _step: None)
        make_dirs(directory)  # a power cut must not take the directory back
        self._lock = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise BlockingIOError(f"another sink holds {directory}") from None
        self._committed = self._log = -1
        self._pending: tuple[int, int] | None = None  # (fd, base offset)
        self._dir_dirty = False
        self.committed_offset = 0
        self.output_offset = 0
        """The next byte's offset: committed + prepared + written since."""
        self.prepared: Prepared | None = None
        self.last_committed: str | None = None
        self.gap = False
        """A data message skipped ahead of the output offset: the next Phase1 votes no."""
        try:
            created = not (directory / "committed").exists() or not (directory / "txnlog").exists()
            self._committed = os.open(directory / "committed", os.O_RDWR | os.O_CREAT, 0o644)
            self._log = os.open(directory / "txnlog", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            if created:
                fsync_dir(directory)
            self._recover()
        except BaseException:
            self.close_files()  # a refused directory is not left locked
            raise

    # ---------------------------------------------------------------- recovery
    def _recover(self) -> None:
        data = _read_all(self._log)
        records, good = decode_txnlog(data)
        if good < len(data):
            log.warning("txnlog: ignoring a torn last record (%d bytes)", len(data) - good)
            os.ftruncate(self._log, good)
            os.fsync(self._log)
        last_commit: TxnLogRecord | None = None
        for r in records:
            if r.kind is TxnLogKind.PREPARE:
                if r.start != self.committed_offset or self.prepared is not None:
                    raise SinkStoreCorruptError(f"txnlog: PREPARE {r.txn_id!r} out of order")
                self.prepared = Prepared(r.txn_id, r.start, r.end)
            elif self.prepared is None or self.prepared.txn_id != r.txn_id:
                raise SinkStoreCorruptError(f"txnlog: {r.kind.name} of unprepared {r.txn_id!r}")
            elif r.kind is TxnLogKind.COMMIT:
                self.committed_offset = r.end
                self.last_committed = r.txn_id
                self.prepared = None
                last_commit = r
            else:
                self.prepared = None
        pendings = self._pending_files()
        size = os.fstat(self._committed).st_size
        if size > self.committed_offset:
            raise SinkStoreCorruptError(
                f"committed holds {size} bytes but the txnlog commits {self.committed_offset}"
            )
        if size < self.committed_offset:
            if last_commit is None or size < last_commit.start:
                raise SinkStoreCorruptError(
                    f"committed holds {size} bytes; the txnlog commits {self.committed_offset}"
                )
            self._redo_copy(pendings, size, self.committed_offset)
        keep = self.prepared.end if self.prepared else self.committed_offset
        chosen = self._choose_pending(pendings, self.committed_offset, keep)
        for base, path in pendings:
            if (base, path) != chosen:
                path.unlink()
        if chosen is not None:
            fd = os.open(chosen[1], os.O_RDWR)
            os.ftruncate(fd, keep - chosen[0])
            self._pending = (fd, chosen[0])
        self.output_offset = keep

    def _pending_files(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob("pending.*"):
            suffix = path.name.partition(".")[2]
            if not suffix.isdigit():
                raise SinkStoreCorruptError(f"unexpected file {path.name} in the sink directory")
            found.append((int(suffix), path))
        return sorted(found)

    def _choose_pending(
        self, pendings: Sequence[tuple[int, Path]], start: int, end: int
    ) -> tuple[int, Path] | None:
        """The pending file holding ``[start, end)``: the newest one (largest base) that
        starts at or before ``start``; None when the range is empty."""
        if start == end:
            return None
        for base, path in reversed(pendings):
            if base <= start and path.stat().st_size >= end - base:
                return base, path
        raise SinkStoreCorruptError(f"no pending file holds the prepared bytes [{start}, {end})")

    def _redo_copy(self, pendings: Sequence[tuple[int, Path]], start: int, end: int) -> None:
        chosen = self._choose_pending(pendings, start, end)
        assert chosen is not None
        log.warning("committed: copying bytes [%d, %d) again after a crash", start, end)
        fd = os.open(chosen[1], os.O_RDONLY)
        try:
            self._copy(fd, chosen[0], start, end)
        finally:
            os.close(fd)
        os.fsync(self._committed)

    def _copy(self, fd: int, base: int, start: int, end: int) -> None:
        pos = start
        while pos < end:
            chunk = os.pread(fd, min(_COPY_CHUNK, end - pos), pos - base)
            if not chunk:
                raise SinkStoreCorruptError(f"pending file ends before byte {pos}")
            os.pwrite(self._committed, chunk, pos)
            pos += len(chunk)

    # ---------------------------------------------------------------- the session
    async def start_session(self) -> None:
        """A new connection: bytes written but not prepared are dropped (the peer sends
        them again from the offset its NOTIFY_ACK gets)."""
        self._discard_to(self.prepared.end if self.prepared else self.committed_offset)

    def write(self, message_id: int, payload: bytes) -> bool:
        """Append a data message whose id must be the output offset.

        Returns False (and keeps nothing) for an id beyond the output offset: data was
        lost in between, so the next Phase1 votes no.

        Raises:
            SinkStateError: an id below the output offset (a duplicate).
        """
        if message_id < self.output_offset:
            raise SinkStateError(
                f"data message id {message_id} is below the output offset "
                f"{self.output_offset} (a duplicate)"
            )
        if message_id > self.output_offset or self.gap:
            self.gap = True
            return False
        if self._pending is None:
            path = self.directory / f"pending.{self.output_offset}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self._pending = (fd, self.output_offset)
            self._dir_dirty = True
        fd, base = self._pending
        view = memoryview(payload)
        pos = self.output_offset - base
        while view:
            written = os.pwrite(fd, view, pos)
            view, pos = view[written:], pos + written
        self.output_offset += len(payload)
        return True

    async def prepare(self, txn_id: str, ranges: Sequence[tuple[int, int, int]]) -> Vote:
        """Phase1: vote on ``ranges`` (stream id, start, end); a yes is durable first."""
        p = self.prepared
        if len(ranges) > 1 or any(stream != DATA_STREAM_ID for stream, _, _ in ranges):
            return Vote(False, f"Phase1 {txn_id!r} must name one range of stream 1")
        start, end = (ranges[0][1], ranges[0][2]) if ranges else (self.committed_offset,) * 2
        if p is not None:
            if p == Prepared(txn_id, start, end):
                return Vote(True)  # the same Phase1 again: the same answer
            return Vote(False, f"transaction {p.txn_id!r} is prepared and not yet decided")
        if self.gap:
            return Vote(False, "data was skipped (a message id beyond the output offset)")
        if start != self.committed_offset:
            return Vote(
                False,
                f"Phase1 {txn_id!r} starts at {start}, not at the committed offset "
                f"{self.committed_offset}",
            )
        if not start <= end <= self.output_offset:
            return Vote(
                False,
                f"Phase1 {txn_id!r} ends at {end}, outside [{start}, {self.output_offset}]",
            )
        if self._pending is not None:
            os.fsync(self._pending[0])
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self._on_step("pending-synced")
        self._append(TxnLogRecord(TxnLogKind.PREPARE, txn_id, start, end))
        self.prepared = Prepared(txn_id, start, end)
        self._on_step("prepare-logged")
        return Vote(True)

    async def commit(self, txn_id: str) -> bool:
        """Phase2 commit: the prepared range becomes committed and durable.

        Returns False when ``txn_id`` is the transaction committed last (a repeated
        Phase2: nothing to do).

        Raises:
            SinkStateError: ``txn_id`` is not prepared here.
        """
        p = self.prepared
        if p is None or p.txn_id != txn_id:
            if p is None and txn_id == self.last_committed:
                return False
            raise SinkStateError(f"Phase2 commit of {txn_id!r}, which is not prepared here")
        self._append(TxnLogRecord(TxnLogKind.COMMIT, txn_id, p.start, p.end))
        self._on_step("commit-logged")
        if p.end > p.start:
            assert self._pending is not None
            self._copy(self._pending[0], self._pending[1], p.start, p.end)
            os.fsync(self._committed)
        self.committed_offset = p.end
        self.last_committed = txn_id
        self.prepared = None
        self._on_step("commit-applied")
        if self.output_offset == self.committed_offset:
            self._drop_pending()
        return True

    async def abort(self, txn_id: str) -> None:
        """Phase2 abort: drop the uncommitted bytes of ``txn_id`` and after it, never
        below the committed offset (nor below a different prepared transaction).

        Raises:
            SinkStateError: ``txn_id`` was committed already.
        """
        p = self.prepared
        if p is None and txn_id == self.last_committed:
            raise SinkStateError(f"Phase2 abort of {txn_id!r}, which is committed")
        if p is not None and p.txn_id == txn_id:
            self._append(TxnLogRecord(TxnLogKind.ABORT, txn_id, p.start, p.end))
            self.prepared = p = None
            self._on_step("abort-logged")
        self._discard_to(p.end if p is not None else self.committed_offset)

    async def uncommitted(self) -> list[str]:
        """The transactions prepared and not yet decided (ListUncommitted's answer)."""
        return [self.prepared.txn_id] if self.prepared else []

    async def close(self) -> None:
        self.close_files()

    def close_files(self) -> None:
        """Close the files and release the directory's lock (synchronously)."""
        for fd in (self._committed, self._log, *([self._pending[0]] if self._pending else [])):
            if fd >= 0:
                os.close(fd)
        self._pending = None
        os.close(self._lock)  # releases the flock

    # ---------------------------------------------------------------- helpers
    def _append(self, record: TxnLogRecord) -> None:
        os.write(self._log, record.encode())  # O_APPEND: always after the good prefix
        os.fsync(self._log)

    def _discard_to(self, keep: int) -> None:
        self.gap = False
        if keep == self.output_offset:
            return
        self.output_offset = keep
        if keep == self.committed_offset:
            self._drop_pending()
        elif self._pending is not None:
            os.ftruncate(self._pending[0], keep - self._pending[1])

    def _drop_pending(self) -> None:
        if self._pending is not None:
            fd, base = self._pending
            os.close(fd)
            (self.directory / f"pending.{base}").unlink()
            self._pending = None


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""
