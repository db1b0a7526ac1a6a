"""Data records in log files: encoding them, scanning a file (telling a torn tail from
damage), cutting replay batches from a scanned file, and appending."""

from __future__ import annotations

import mmap
import os
from array import array
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ambrosia_py.errors import LogCorruptionError, WireFormatError
from ambrosia_py.wire import HEADER_SIZE, Incomplete, check_bytes
from ambrosia_py.wire._paths import stored_as_wire, stored_spans
from ambrosia_py.wire.records import HEADER as _HEADER

from .watermarks import decode_watermarks as _decode_watermarks
from .watermarks import encode_watermarks as _encode_watermarks

__all__ = ["DiskRecord", "LogScan", "LogWriter", "encode_disk_record", "scan_log",
           "wire_batches"]



def encode_disk_record(
    committer_id: int, seq_id: int, body: bytes, inputs: Mapping[str, int],
    epoch: int | None = None,
) -> tuple[bytes, bytes]:
    """``(disk bytes, wire bytes)`` of one data record.

    The wire form (what the binding receives) is the disk form with a positive length
    and without the watermarks.
    """
    length = HEADER_SIZE + len(body)
    check = check_bytes(body)
    wire = _HEADER.pack(committer_id, length, check, seq_id) + body
    disk = _HEADER.pack(committer_id, -length - 1, check, seq_id) + body
    return disk + _encode_watermarks(inputs, epoch), wire


class DiskRecord(NamedTuple):
    """One data record read back from a log file."""

    seq_id: int
    offset: int  # where the record starts in its file
    end: int  # where the next record starts (watermarks included)
    wire: bytes  # header (positive length) + body, as sent to a binding
    inputs: dict[str, int]  # input watermarks after this record
    epoch: int = 0  # the active/active primary's epoch that wrote it (0: standalone)

    @property
    def body(self) -> bytes:
        return self.wire[HEADER_SIZE:]


class LogScan:
    """Reads the records of one log file, telling a torn tail from damage.

    Iterate to get ``DiskRecord``s. Afterwards ``torn_at`` is the offset where an
    incomplete final record begins (None if the file ends on a whole record) and
    ``good_end`` is the offset just after the last whole record.

    A torn tail is a final record that runs past the end of the file, or whose check
    bytes fail while nothing follows it, or a tail of zero bytes (a crash during a
    write, or a power loss that left zero-filled blocks). Anything else that does not
    parse is damage: ``LogCorruptionError`` naming the file and offset.

    Args:
        allow_torn_tail: if False a torn tail is damage too (only the newest file may
            have one: the coordinator cuts it off before appending again).
        first_seq: the sequence id the first record must have, if known.
    """

    def __init__(self, path: Path, *, allow_torn_tail: bool = True,
                 first_seq: int | None = None, committer_id: int | None = None,
                 start: int = 0, limit: int | None = None) -> None:
        self.path = path
        self.start = start  # a follower resumes where it stopped
        self.limit = limit  # a sealed log ends at its seal, whatever follows it
        self.allow_torn_tail = allow_torn_tail
        self.first_seq = first_seq
        self.committer_id = committer_id
        self.torn_at: int | None = None
        self.good_end = 0
        self.last_seq: int | None = None
        self.count = 0

    def _damage(self, offset: int, reason: str) -> LogCorruptionError:
        return LogCorruptionError(str(self.path), offset, reason)

    def __iter__(self) -> Iterator[DiskRecord]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed in the finally below
        except OSError as err:
            raise self._damage(0, f"cannot open: {err.strerror}") from None
        try:
            size = os.fstat(f.fileno()).st_size
            self.good_end = self.start
            if self.limit is not None:
                size = min(size, self.limit)
            if size <= self.start:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                yield from self._records(buf, size, self.start, self.first_seq, {})
        finally:
            f.close()

    def spans(self, starts: array[int], inputs: dict[str, int]) -> None:
        """Check every record as iterating does, without building ``DiskRecord``s:
        append where each whole record starts to ``starts`` and apply its input
        watermarks to ``inputs``. ``count``, ``last_seq``, ``good_end`` and ``torn_at``
        are set as after iterating; damage raises the same errors.

        A recovery plan needs only these, and building a record object per record
        was most of its scan's time.
        """
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed in the finally below
        except OSError as err:
            raise self._damage(0, f"cannot open: {err.strerror}") from None
        try:
            size = os.fstat(f.fileno()).st_size
            self.good_end = self.start
            if self.limit is not None:
                size = min(size, self.limit)
            if size <= self.start:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                self._spans(buf, size, starts, inputs)
        finally:
            f.close()

    def _spans(self, buf: Any, size: int, starts: array[int], inputs: dict[str, int]) -> None:
        # The usual records (right committer and sequence id, one input watermark under
        # a name seen before, no trims, check bytes good) are taken by the codec's
        # ``stored_spans``, compiled when built; anything else goes through ``_records``
        # one record at a time, so every decision about damage and torn tails is made by
        # the one general reader.
        pos = self.start
        expect = self.first_seq
        cid = self.committer_id
        names: dict[bytes, str] = {}
        count = 0
        last = self.last_seq
        try:
            while pos < size:
                pos, taken, got = stored_spans(buf, pos, size, cid, expect, names, inputs,
                                               starts)
                if taken:
                    count += taken
                    last = got
                    expect = last + 1
                if pos >= size:
                    break
                self.good_end = pos
                records = self._records(buf, size, pos, expect, names)
                rec = next(records, None)
                records.close()
                if rec is None:
                    return  # a torn tail (``torn_at`` is set)
                inputs.update(rec.inputs)
                starts.append(pos)
                count += 1
                last = rec.seq_id
                expect = last + 1
                pos = rec.end
            self.good_end = pos
        finally:
            self.count += count
            self.last_seq = last

    def _torn(self, buf: Any, offset: int, size: int, reason: str) -> None:
        if not self.allow_torn_tail:
            raise self._damage(offset, f"incomplete record at the end of a closed log: {reason}")
        self.torn_at = offset

    def _records(self, buf: Any, size: int, pos: int, expect: int | None,
                 names: dict[bytes, str]) -> Generator[DiskRecord, None, None]:
        # ``names``: watermark names seen in this file
        while pos < size:
            if size - pos < HEADER_SIZE:
                self._torn(buf, pos, size, "the file ends inside a record header")
                return
            committer, stored, check, seq = _HEADER.unpack_from(buf, pos)
            length = -stored - 1
            if stored >= 0 or length < HEADER_SIZE:
                if buf[pos:size].count(0) == size - pos:
                    self._torn(buf, pos, size, "the file ends in zero bytes")
                    return
                raise self._damage(pos, f"length field {stored} is not a stored record length")
            if self.committer_id is not None and committer != self.committer_id:
                raise self._damage(
                    pos, f"committer id {committer} is not this instance's {self.committer_id}"
                )
            body_end = pos + length
            if body_end > size:
                self._torn(buf, pos, size, "the record runs past the end of the file")
                return
            if seq < 0:
                raise self._damage(pos, f"sequence id {seq} in a log file (data records only)")
            if expect is not None and seq != expect:
                raise self._damage(pos, f"sequence id {seq} where {expect} was expected")
            body = buf[pos + HEADER_SIZE : body_end]
            try:
                inputs, end, epoch = _decode_watermarks(buf, body_end, size, names)
            except Incomplete:
                if check_bytes(body) == check:
                    self._torn(buf, pos, size, "the file ends inside a record's watermarks")
                else:
                    self._torn(buf, pos, size, "the final record's check bytes do not match")
                return
            except WireFormatError as err:
                raise self._damage(body_end, f"watermarks do not parse: {err.reason}") from None
            if check_bytes(body) != check:
                if end >= size:
                    self._torn(buf, pos, size, "the final record's check bytes do not match")
                    return
                raise self._damage(pos, f"record {seq}: check bytes do not match its body")
            wire = _HEADER.pack(committer, length, check, seq) + body
            yield DiskRecord(seq, pos, end, wire, inputs, epoch)
            self.count += 1
            self.last_seq = seq
            self.good_end = end
            expect = seq + 1
            pos = end


def wire_batches(path: Path, offsets: Sequence[int], first_seq: int,
                 max_bytes: int = 1 << 20) -> Iterator[tuple[bytes | bytearray, int]]:
    """The records that start at ``offsets`` of a log a ``LogScan`` has already read, in
    their wire form (positive length, no watermarks), as ``(bytes, last sequence id)``
    batches of about ``max_bytes``.

    A recovery scans its logs once to check them and to plan; sending them again needs
    neither the check bytes nor the watermarks, only the spans the scan found (cut by the
    codec's ``stored_as_wire``, compiled when built). Each header is still compared with
    the expected sequence id, so a file that changed since the scan is reported as damage
    instead of replaying something else.
    """
    if not offsets:
        return
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as err:
        raise LogCorruptionError(str(path), 0, f"cannot open: {err.strerror}") from None
    try:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            i, seq = 0, first_seq
            while i < len(offsets):
                out, nxt, ok = stored_as_wire(buf, offsets, i, seq, max_bytes)
                seq += nxt - i
                i = nxt
                if not ok:
                    raise LogCorruptionError(str(path), offsets[i], f"record {seq} changed "
                                             "since the log was scanned")
                yield out, seq - 1
    finally:
        f.close()


def scan_log(path: Path, **kwargs: Any) -> tuple[list[DiskRecord], LogScan]:
    """Every whole record of a file (see ``LogScan``), and the scan's findings."""
    scan = LogScan(path, **kwargs)
    return list(scan), scan


class LogWriter:
    """Appends records to one log file. ``write`` and ``sync`` block: call them off the
    event loop (the coordinator's committer does, so group commit pays one fsync per batch)."""

    def __init__(self, path: Path, truncate_at: int | None = None,
                 exclusive: bool = False) -> None:
        self.path = path
        # exclusive: an active/active primary starting a log must be its only creator.
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else 0)
        self._fd = os.open(path, flags, 0o644)
        if truncate_at is not None:
            os.ftruncate(self._fd, truncate_at)
            os.fsync(self._fd)
        self.size = os.lseek(self._fd, 0, os.SEEK_END)
        self._synced = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.size += len(data)

    def sync(self) -> None:
        """Make what was written durable. The first sync of a writer is an fsync (all of
        the file's metadata); later ones are fdatasyncs, which still flush the file's
        size (appends need nothing else) but skip its times: a commit's fsync is on
        the round trip's path, and this measured about 10% less per sync here."""
        if self._synced:
            os.fdatasync(self._fd)
        else:
            os.fsync(self._fd)
            self._synced = True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
