"""Data records in log files: encoding them, scanning a file (telling a torn tail from
damage) and cutting replay batches from a scanned file (``writer``: writing them).

A live log may end in zeros: the writer fills a region ahead of its end with zeros,
syncs it once, and then writes records into it (see ``writer.LogWriter``). Readers take
that zero tail for space not written yet, never for records.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from array import array
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ambrosia_core.errors import WireFormatError
from ambrosia_core.wire import HEADER_SIZE, Incomplete, check_bytes
from ambrosia_core.wire.records import HEADER as _HEADER
from ambrosia_ic.errors import LogCorruptionError

from .fastpaths import stored_as_wire, stored_spans
from .watermarks import CHECK_KEY
from .watermarks import checked as _checked
from .watermarks import decode_watermarks as _decode_watermarks
from .watermarks import encode_watermarks as _encode_watermarks
from .watermarks import record_check as _record_check

__all__ = ["DiskRecord", "LogScan", "encode_disk_record", "scan_log", "wire_batches",
           "written_end"]

_CHUNK = 1 << 16
_ZEROS = bytes(_CHUNK)
_SEQ = struct.Struct("<q")
_CHECK_NAME = CHECK_KEY.encode()
# Watermarks a cut-short write may have left after a whole body: past this many bytes of
# them a record that does not parse is damage, not a torn tail.
_MAX_TORN_WATERMARKS = 4096


def _zeros_from(fd: int, start: int, size: int) -> int:
    """Where the bytes of the file from ``start`` to ``size`` that are not zero end
    (``start`` if all are zero). Reads 64 KiB at a time from the end, which costs less
    than a mapping did (measured: bench/README.md; a standby looks every 5 ms).

    Read, not mapped: the zero tail is what a writer cuts off when it closes a log or
    moves to the next one, and a mapped page past a file's new end is a SIGBUS for
    whoever touches it (``ambrosia log dump`` reading a live log, say). A read past the
    end returns less instead, and a tail cut off was only zeros. What is not zero ends
    before any cut, so readers may map the file up to the end this returns.
    """
    end = size
    while end > start:
        lo = max(start, end - _CHUNK)
        chunk = os.pread(fd, end - lo, lo)
        if chunk != _ZEROS[: len(chunk)]:
            return lo + len(chunk.rstrip(b"\0"))
        end = lo
    return start


def written_end(path: Path) -> int:
    """Where what was written of a log file ends, without its zero tail (a live log's
    logical size, give or take the zero bytes its last record ends with)."""
    with open(path, "rb") as f:
        return _zeros_from(f.fileno(), 0, os.fstat(f.fileno()).st_size)


def encode_disk_record(
    committer_id: int, seq_id: int, body: bytes, inputs: Mapping[str, int],
    epoch: int | None = None,
) -> tuple[bytes, bytes]:
    """``(disk bytes, wire bytes)`` of one data record.

    The wire form (what the binding receives) is the disk form with a positive length
    and without the watermarks. The disk form ends in the check bytes of its header and
    watermarks (``watermarks.record_check``).
    """
    length = HEADER_SIZE + len(body)
    check = check_bytes(body)
    wire = _HEADER.pack(committer_id, length, check, seq_id) + body
    header = _HEADER.pack(committer_id, -length - 1, check, seq_id)
    marks = _encode_watermarks(inputs, epoch)
    return b"".join((header, body, marks, _record_check(header, marks))), wire


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
    bytes or watermarks fail while nothing but zeros follows it (a crash during a
    write into space the writer had filled with zeros, or a power loss). Anything else
    that does not parse or check is damage: ``LogCorruptionError`` naming the file and
    offset. Every byte of a stored record is covered by check bytes (its body by the
    header's, the header and watermarks by the record's own: ``watermarks``).

    A zero tail (nothing but zero bytes from a record boundary to the end) is space the
    writer had not written yet: ``zero_tail`` says the scan ended on one. In a scan that
    allows a torn tail it is reported as one (``torn_at``: a recovery cuts it off);
    otherwise it simply ends the file, since it cannot hide a record (the next log's
    first sequence id is checked against this one's last).

    A record followed only by zeros may be a write cut short whose missing bytes read
    as zeros: it is whole if its check bytes match (what is missing was zeros anyway),
    otherwise a torn tail.

    Args:
        allow_torn_tail: if False a torn record is damage (only the newest file may
            have one: the coordinator cuts it off before writing again).
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
        self.zero_tail = False

    def _damage(self, offset: int, reason: str) -> LogCorruptionError:
        return LogCorruptionError(str(self.path), offset, reason)

    @contextlib.contextmanager
    def _mapped(self) -> Iterator[tuple[Any, int, int] | None]:
        """The file mapped, its size (up to ``limit``) and where what is not zero ends;
        None if it holds nothing past ``start`` (a zero tail is noted as such)."""
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
                yield None
                return
            written = _zeros_from(f.fileno(), self.start, size)
            if written <= self.start:  # (the file may have been cut to nothing since)
                self._zeros(self.start)
                yield None
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                yield buf, size, written
        finally:
            f.close()

    def __iter__(self) -> Iterator[DiskRecord]:
        with self._mapped() as mapped:
            if mapped is not None:
                buf, size, written = mapped
                yield from self._records(buf, size, written, self.start, self.first_seq, {})

    def spans(self, starts: array[int], inputs: dict[str, int]) -> None:
        """Check every record as iterating does, without building ``DiskRecord``s:
        append where each whole record starts to ``starts`` and apply its input
        watermarks to ``inputs``. ``count``, ``last_seq``, ``good_end`` and ``torn_at``
        are set as after iterating; damage raises the same errors.

        A recovery plan needs only these, and building a record object per record
        was most of its scan's time.
        """
        with self._mapped() as mapped:
            if mapped is not None:
                self._spans(*mapped, starts, inputs)

    def _spans(self, buf: Any, size: int, written: int, starts: array[int],
               inputs: dict[str, int]) -> None:
        # The usual records (right committer and sequence id, one input watermark under
        # a name seen before, no epoch, check bytes good) are taken by ``stored_spans``
        # (``fastpaths``: compiled when built); anything else goes through ``_records``
        # one record at a time, so every decision about damage and torn tails is made by
        # the one general reader.
        # ``stored_spans`` takes only records that end where something was written
        # (``written``), so the one before a zero tail gets the general reader's look (a
        # torn tail or a whole record whose last bytes are zero).
        pos = self.start
        expect = self.first_seq
        cid = self.committer_id
        names: dict[bytes, str] = {}
        count = 0
        last = self.last_seq
        try:
            while pos < size:
                pos, taken, got = stored_spans(buf, pos, written, cid, expect, names,
                                               inputs, starts)
                if taken:
                    count += taken
                    last = got
                    expect = last + 1
                if pos >= size:
                    break
                self.good_end = pos
                records = self._records(buf, size, written, pos, expect, names)
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

    def _torn(self, offset: int, reason: str) -> None:
        if not self.allow_torn_tail:
            raise self._damage(offset, f"incomplete record at the end of a closed log: {reason}")
        self.torn_at = offset

    def _torn_unless_followed(self, buf: Any, pos: int, seq: int, written: int,
                              reason: str) -> None:
        """A record at ``pos`` that does not parse or check to its end is a torn tail
        (a write cut short: a prefix, then zeros or the end of the file), unless the
        header of the record after it follows (a record is written only once the one
        before is whole and synced), or what was written ends as a record ends (its
        check entry's name and 8 bytes, the last not zero): then it is damaged (a
        flipped bit in its length, say), and cutting it off would lose it or the rest."""
        nxt = seq + 1
        want = _SEQ.pack(nxt)
        at = buf.find(want, pos + HEADER_SIZE + 16, written)
        while at >= 0:
            committer, stored, _, _ = _HEADER.unpack_from(buf, at - 16)
            if stored < -HEADER_SIZE and (self.committer_id is None
                                          or committer == self.committer_id):
                raise self._damage(pos, f"record {seq}: {reason}, and record {nxt} follows "
                                   f"at offset {at - 16}")
            at = buf.find(want, at + 1, written)
        ending = written - 8 - len(_CHECK_NAME)
        if ending >= pos + HEADER_SIZE and buf[ending : written - 8] == _CHECK_NAME:
            raise self._damage(pos, f"record {seq}: {reason}, though it was written to its "
                               "end")
        self._torn(pos, reason)

    def _zeros(self, offset: int) -> None:
        """Nothing but zeros from ``offset`` on: space not written yet."""
        self.zero_tail = True
        if self.allow_torn_tail:
            self.torn_at = offset

    def _records(self, buf: Any, size: int, written: int, pos: int, expect: int | None,
                 names: dict[bytes, str]) -> Generator[DiskRecord, None, None]:
        # ``written``: where the bytes that are not zero end; ``names``: watermark names
        # seen in this file
        while pos < size:
            if written <= pos:
                self._zeros(pos)
                return
            if size - pos < HEADER_SIZE:
                self._torn(pos, "the file ends inside a record header")
                return
            committer, stored, check, seq = _HEADER.unpack_from(buf, pos)
            length = -stored - 1
            bad = None
            if stored >= 0 or length < HEADER_SIZE:
                bad = f"length field {stored} is not a stored record length"
            elif self.committer_id is not None and committer != self.committer_id:
                bad = f"committer id {committer} is not this instance's {self.committer_id}"
            elif seq < 0:
                bad = f"sequence id {seq} in a log file (data records only)"
            elif expect is not None and seq != expect:
                bad = f"sequence id {seq} where {expect} was expected"
            if bad is not None:
                if written <= pos + HEADER_SIZE:  # a header cut short, zeros after it
                    self._torn(pos, f"the final record's header is cut short: {bad}")
                    return
                raise self._damage(pos, bad)
            body_end = pos + length
            if body_end > size:
                self._torn_unless_followed(buf, pos, seq, written,
                                           "the record runs past the end of the file")
                return
            body = buf[pos + HEADER_SIZE : body_end]
            try:
                inputs, end, epoch = _decode_watermarks(buf, body_end, size, names)
            except Incomplete:
                self._torn_unless_followed(buf, pos, seq, written,
                                           "the file ends inside a record's watermarks")
                return
            except WireFormatError as err:
                if written <= body_end + _MAX_TORN_WATERMARKS:
                    self._torn_unless_followed(
                        buf, pos, seq, written,
                        f"the final record's watermarks do not parse: {err.reason}")
                    return
                raise self._damage(body_end, f"watermarks do not parse: {err.reason}") from None
            if check_bytes(body) != check:
                bad = "body"
            elif not _checked(buf, pos, body_end, end):
                bad = "header and watermarks"
            if bad is not None:
                # A write cut short leaves zeros where its bytes were missing, its last
                # byte among them: a record read whole that fails is damage.
                if written <= end and not buf[end - 1]:
                    self._torn_unless_followed(
                        buf, pos, seq, written,
                        f"the final record's check bytes do not match its {bad}")
                    return
                raise self._damage(pos, f"record {seq}: check bytes do not match its {bad}")
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
    neither the check bytes nor the watermarks, only the spans the scan found (cut by
    ``fastpaths.stored_as_wire``, compiled when built). Each header is still compared with
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
