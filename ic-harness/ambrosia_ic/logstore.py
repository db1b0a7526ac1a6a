"""The log store: log files, checkpoint files and replay digests on disk.

Layout (the real coordinator's): ``<log-dir>/<instance>_<version>/``

- ``serverlog<N>``: data records back to back, no file header. On disk a record's length
  field is stored as ``-(length)-1`` and the record is followed by watermarks that its
  length does not count::

      zz32 nInputs {zz32 len, name, int64 lastProcessedID, int64 lastProcessedReplayableID}*
      zz32 nTrims  {zz32 len, name, int64 trimSeqNo}*

  The input watermarks after a record are the whole map (sender -> last link sequence
  number logged), so the last whole record of a file says where every sender stands. A
  follower can tail a file: records are only ever appended, and each one is self-checking.
- ``serverchkpt<N>``::

      "AMBRCKP2"  int32 n  n bytes of coordinator state (msgpack)
      the binding's Checkpoint message as received  the binding's raw bytes
      uint64 XXH64 (seed 0) of every byte before it

  Written to a temporary name, fsynced and renamed, so it exists only when whole. The
  check bytes are verified over the whole file before any of it is used (a binding must
  never load damaged state). ``AMBRCKP1`` files (the format before the check bytes) are
  refused by name.
- ``serverdigest<N>``: the determinism check: per binding output since checkpoint N,
  16 bytes (uint64 XXH64 of the output message, int64 seq id last delivered when it came).
- ``serverlock``: held (flock) by the coordinator writing this directory.
- ``serverseal<N>``: active/active only: int64, where log N ends (see ``replica.py``).

Checkpoint N pairs with log N; replay goes on through N+1, N+2, ... After each new
checkpoint the last K (the registration's ``keep_checkpoints``) stay with every file
from the oldest of them on (``remove_unkept``), so a replay can start from any of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import xxhash

from ambrosia_py.errors import (
    CoordinatorError,
    LockLostError,
    LogCorruptionError,
    WireFormatError,
)
from ambrosia_py.wire import HEADER_SIZE, check_bytes, decode_zz32, decode_zz64, encode_zz32
from ambrosia_py.wire.varint import Incomplete

from .durable import fsync_dir, replace_durably

__all__ = [
    "CHECKPOINT_MAGIC",
    "CheckpointFile",
    "DiskRecord",
    "InstanceLock",
    "LogScan",
    "LogWriter",
    "checkpoint_path",
    "digest_path",
    "encode_disk_record",
    "file_numbers",
    "fsync_dir",
    "log_path",
    "read_digest",
    "read_seal",
    "remove_first_start_leftovers",
    "remove_unkept",
    "scan_log",
    "write_checkpoint",
    "wire_batches",
    "write_seal",
]

LOG_PREFIX = "serverlog"
CHECKPOINT_PREFIX = "serverchkpt"
DIGEST_PREFIX = "serverdigest"
SEAL_PREFIX = "serverseal"
LOCK_NAME = "serverlock"
CHECKPOINT_MAGIC = b"AMBRCKP2"
UNCHECKED_CHECKPOINT_MAGIC = b"AMBRCKP1"  # the format before the check bytes
_TRAILER = struct.Struct("<Q")
_HEADER = struct.Struct("<iiQq")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
DIGEST_ENTRY = struct.Struct("<Qq")


def log_path(d: Path, n: int) -> Path:
    return d / f"{LOG_PREFIX}{n}"


def checkpoint_path(d: Path, n: int) -> Path:
    return d / f"{CHECKPOINT_PREFIX}{n}"


def digest_path(d: Path, n: int) -> Path:
    return d / f"{DIGEST_PREFIX}{n}"


def file_numbers(d: Path, prefix: str) -> list[int]:
    """The N of every ``<prefix><N>`` in ``d``, ascending."""
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        rest = p.name[len(prefix):]
        if p.name.startswith(prefix) and rest.isdigit():
            out.append(int(rest))
    return sorted(out)


def remove_unkept(d: Path, keep: int, prefixes: Sequence[str],
                  ignore: Collection[int] = ()) -> int | None:
    """Keep the newest ``keep`` checkpoints (not counting ``ignore``: checkpoints known
    to be damaged) and every file from the oldest of them on; remove the ``<prefix><N>``
    files before it. Call only once the newest checkpoint is durable. Returns the
    number of the oldest checkpoint kept (None when there is none).

    Checkpoint N pairs with log N and replay goes on through N+1, ..., so the logs from
    the oldest kept checkpoint on are exactly what a replay from any kept one reads.
    """
    counted = [k for k in file_numbers(d, CHECKPOINT_PREFIX) if k not in ignore]
    if not counted:
        return None
    oldest = counted[-max(1, keep):][0]
    for prefix in prefixes:
        for k in file_numbers(d, prefix):
            if k < oldest:
                (d / f"{prefix}{k}").unlink(missing_ok=True)
    fsync_dir(d)
    return oldest


def remove_first_start_leftovers(d: Path) -> None:
    """Remove what a first start that died before its record 0 was durable left behind
    (see ``recovery.interrupted_first_start``).

    Raises:
        CoordinatorError: ``d`` holds a checkpoint after 1: a history, not leftovers.
    """
    later = [k for k in file_numbers(d, CHECKPOINT_PREFIX) if k != 1]
    if later:
        raise CoordinatorError(f"{d}: holds checkpoint {later[-1]}, so it is not the "
                               "leftovers of a first start; refusing to start afresh")
    for prefix in (LOG_PREFIX, DIGEST_PREFIX, SEAL_PREFIX):
        for k in file_numbers(d, prefix):
            (d / f"{prefix}{k}").unlink()
    # Checkpoint 1 goes last: while it exists the leftovers are recognised as such (a
    # log without any checkpoint is refused, never overwritten).
    for tmp in d.glob(f".{CHECKPOINT_PREFIX}1.*tmp"):
        tmp.unlink(missing_ok=True)
    (d / f"{CHECKPOINT_PREFIX}1").unlink(missing_ok=True)
    fsync_dir(d)


# ------------------------------------------------------------------ log records


# An active/active primary stamps its epoch on every record it writes, as a trim entry
# under a name no instance can have (names start with a letter or digit); followers use
# it to tell records written before a takeover from those a fenced primary wrote after.
EPOCH_KEY = "#epoch"
_EPOCH_RAW = EPOCH_KEY.encode()


def _encode_watermarks(inputs: Mapping[str, int], epoch: int | None = None) -> bytes:
    parts = [encode_zz32(len(inputs))]
    for name, seq in sorted(inputs.items()):
        raw = name.encode("utf-8")
        parts += [encode_zz32(len(raw)), raw, _I64.pack(seq), _I64.pack(seq)]
    # The trim positions live in the checkpoint; the only trim entry is the epoch.
    if epoch is None:
        parts.append(encode_zz32(0))
    else:
        parts += [encode_zz32(1), encode_zz32(len(_EPOCH_RAW)), _EPOCH_RAW, _I64.pack(epoch)]
    return b"".join(parts)


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
                yield from self._records(buf, size)
        finally:
            f.close()

    def _torn(self, buf: Any, offset: int, size: int, reason: str) -> None:
        if not self.allow_torn_tail:
            raise self._damage(offset, f"incomplete record at the end of a closed log: {reason}")
        self.torn_at = offset

    def _records(self, buf: Any, size: int) -> Iterator[DiskRecord]:
        pos = self.start
        expect = self.first_seq
        names: dict[bytes, str] = {}  # watermark names seen in this file
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
                 max_bytes: int = 1 << 20) -> Iterator[tuple[bytearray, int]]:
    """The records that start at ``offsets`` of a log a ``LogScan`` has already read, in
    their wire form (positive length, no watermarks), as ``(bytes, last sequence id)``
    batches of about ``max_bytes``.

    A recovery scans its logs once to check them and to plan; sending them again needs
    neither the check bytes nor the watermarks, only the spans the scan found. Each
    header is still compared with the expected sequence id, so a file that changed since
    the scan is reported as damage instead of replaying something else.
    """
    if not offsets:
        return
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as err:
        raise LogCorruptionError(str(path), 0, f"cannot open: {err.strerror}") from None
    try:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            size = len(buf)
            unpack = _HEADER.unpack_from
            pack_length = _I32.pack_into
            out = bytearray()
            seq = first_seq
            for pos in offsets:
                _, stored, _, got = unpack(buf, pos) if pos + HEADER_SIZE <= size else (0, 0, 0, -1)
                length = -stored - 1
                if got != seq or length < HEADER_SIZE or pos + length > size:
                    raise LogCorruptionError(str(path), pos, f"record {seq} changed since the "
                                             "log was scanned")
                at = len(out)
                out += buf[pos : pos + length]
                pack_length(out, at + 4, length)
                seq += 1
                if len(out) >= max_bytes:
                    yield out, seq - 1
                    out = bytearray()
            if out:
                yield out, seq - 1
    finally:
        f.close()


def _zz32_at(buf: Any, pos: int, size: int) -> tuple[int, int]:
    """``decode_zz32`` at ``pos`` of a buffer that ends at ``size``: one-byte values (all
    counts and names in practice) without slicing the mmap."""
    if pos < size:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    n, used = decode_zz32(buf[pos : min(size, pos + 5)], 0)
    return n, pos + used


def _decode_watermarks(buf: Any, pos: int, size: int,
                       names: dict[bytes, str] | None = None
                       ) -> tuple[dict[str, int], int, int]:
    """``(input watermarks, end, epoch)`` of the watermarks at ``pos``. ``names`` caches
    decoded names across the records of a scan (the same few senders recur)."""
    if names and pos + 2 <= size and buf[pos] == 2 and not buf[pos + 1] & 0x81:
        # The usual record: one input watermark whose name was seen before, no trims.
        ln = buf[pos + 1] >> 1
        p = pos + 2 + ln
        if p + 17 <= size and buf[p + 16] == 0:
            name = names.get(buf[pos + 2 : p])
            if name is not None:
                return {name: _I64.unpack_from(buf, p)[0]}, p + 17, 0
    return _decode_watermarks_general(buf, pos, size, names)


def _decode_watermarks_general(buf: Any, pos: int, size: int,
                               names: dict[bytes, str] | None
                               ) -> tuple[dict[str, int], int, int]:
    n, pos = _zz32_at(buf, pos, size)
    if n < 0 or n > 1 << 20:
        raise WireFormatError(f"{n} input watermarks")
    inputs: dict[str, int] = {}
    for _ in range(n):
        ln, pos = _zz32_at(buf, pos, size)
        if ln < 0 or ln > 4096:
            raise WireFormatError(f"watermark name length {ln}")
        if pos + ln + 16 > size:
            raise Incomplete
        raw = bytes(buf[pos : pos + ln])
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise WireFormatError("watermark name is not UTF-8") from None
        if names is not None and len(names) < 4096:  # bounded: senders are few
            names[raw] = name
        pos += ln
        inputs[name] = _I64.unpack_from(buf, pos)[0]
        pos += 16
    n, pos = _zz32_at(buf, pos, size)
    if n < 0 or n > 1 << 20:
        raise WireFormatError(f"{n} trim watermarks")
    epoch = 0
    for _ in range(n):
        ln, pos = _zz32_at(buf, pos, size)
        if ln < 0 or ln > 4096:
            raise WireFormatError(f"trim name length {ln}")
        if pos + ln + 8 > size:
            raise Incomplete
        if bytes(buf[pos : pos + ln]) == _EPOCH_RAW:
            epoch = _I64.unpack_from(buf, pos + ln)[0]
        pos += ln + 8
    return inputs, pos, epoch


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

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.size += len(data)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ------------------------------------------------------------------ seals


def seal_path(d: Path, n: int) -> Path:
    return d / f"{SEAL_PREFIX}{n}"


def read_seal(d: Path, n: int) -> int | None:
    """Where log ``n`` ends for everyone, if an active/active takeover sealed it."""
    try:
        data = seal_path(d, n).read_bytes()
    except FileNotFoundError:
        return None
    if len(data) != 8:
        raise LogCorruptionError(str(seal_path(d, n)), 0, f"a seal of {len(data)} bytes")
    return int(_I64.unpack(data)[0])


def write_seal(d: Path, n: int, offset: int) -> None:
    """Seal log ``n`` at ``offset`` (durably, by rename): bytes after it never count,
    whoever writes them."""
    replace_durably(seal_path(d, n), _I64.pack(offset))


# ------------------------------------------------------------------ checkpoints


def write_checkpoint(d: Path, n: int, state: Mapping[str, Any], message: bytes,
                     chunks: Iterator[bytes] | list[bytes]) -> Path:
    """Write ``serverchkpt<n>`` with its check bytes, durably (temporary file, fsync,
    rename, fsync the directory)."""
    path = checkpoint_path(d, n)
    replace_durably(path, _checkpoint_pieces(state, message, chunks))
    return path


def _checkpoint_pieces(state: Mapping[str, Any], message: bytes,
                       chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The pieces of a checkpoint file in order, the check bytes computed as they pass."""
    packed = msgpack.packb(dict(state), use_bin_type=True)
    digest = xxhash.xxh64()
    head = CHECKPOINT_MAGIC + _I32.pack(len(packed)) + packed + message
    digest.update(head)
    yield head
    for c in chunks:
        digest.update(c)
        yield c
    yield _TRAILER.pack(digest.intdigest())


def _verify_checkpoint(path: Path, f: Any, total: int) -> None:
    """Check the magic and the check bytes of the whole file, before anything in it is
    trusted: a flipped byte anywhere (state, message, raw bytes, the check bytes
    themselves) is reported here, in one line naming the file."""
    magic = f.read(8)
    if magic == UNCHECKED_CHECKPOINT_MAGIC:
        raise CoordinatorError(
            f"{path}: a checkpoint in the format before check bytes ({magic.decode()}), "
            "which this version does not read; start the instance afresh in a new log "
            "directory"
        )
    if magic != CHECKPOINT_MAGIC:
        raise LogCorruptionError(str(path), 0, "not a checkpoint file (bad magic)")
    body = total - _TRAILER.size
    if body < 12:
        raise LogCorruptionError(str(path), 0, f"a checkpoint file of {total} bytes is too short")
    digest = xxhash.xxh64(magic)
    left = body - len(magic)
    while left:
        data = f.read(min(1 << 20, left))
        if not data:
            raise LogCorruptionError(str(path), body - left, "the file shrank while read")
        digest.update(data)
        left -= len(data)
    (stored,) = _TRAILER.unpack(f.read(_TRAILER.size))
    if digest.intdigest() != stored:
        raise LogCorruptionError(str(path), body,
                                 "check bytes do not match the checkpoint's content")


class CheckpointFile:
    """A checkpoint file opened for reading, its check bytes verified: ``state``, the
    binding's ``message`` bytes, and ``size`` raw bytes at ``raw_offset`` (``chunks()``
    streams them).

    Raises:
        LogCorruptionError: the file is damaged (one line naming it).
        CoordinatorError: the file is in the format before check bytes.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with open(path, "rb") as f:
                total = os.fstat(f.fileno()).st_size
                _verify_checkpoint(path, f, total)
                f.seek(8)
                (n,) = _I32.unpack(f.read(4))
                body = total - _TRAILER.size
                if n < 0 or 12 + n > body:
                    raise LogCorruptionError(str(path), 8, f"state length {n} overruns the file")
                packed = f.read(n)
                msg = f.read(16)
        except OSError as err:
            raise LogCorruptionError(str(path), 0, f"cannot read: {err.strerror}") from None
        try:
            state = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        except Exception as err:  # msgpack raises several unrelated types
            raise LogCorruptionError(
                str(path), 12, f"coordinator state does not parse: {err}"
            ) from None
        if not isinstance(state, dict):
            raise LogCorruptionError(str(path), 12, "coordinator state is not a map")
        self.state: dict[str, Any] = state
        pos = 12 + n
        try:
            mlen, p = decode_zz32(msg, 0)
            if mlen < 2 or msg[p] != 8:
                raise WireFormatError("not a Checkpoint message")
            size, end = decode_zz64(msg, p + 1)
            if end != p + mlen or size < 0:
                raise WireFormatError("malformed Checkpoint message")
        except (Incomplete, WireFormatError, IndexError) as err:
            raise LogCorruptionError(
                str(path), pos, f"the binding's Checkpoint message does not parse: {err}"
            ) from None
        self.message = msg[:end]
        self.size = size
        self.raw_offset = pos + end
        if self.raw_offset + size != body:
            raise LogCorruptionError(
                str(path), self.raw_offset,
                f"{body - self.raw_offset} raw bytes where the checkpoint announces {size}",
            )

    def chunks(self, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        with open(self.path, "rb") as f:
            f.seek(self.raw_offset)
            left = self.size
            while left:
                data = f.read(min(chunk_size, left))
                if not data:
                    raise LogCorruptionError(str(self.path), f.tell(), "checkpoint cut short")
                left -= len(data)
                yield data


# ------------------------------------------------------------------ digests


def read_digest(path: Path) -> list[tuple[int, int]]:
    """``(output hash, seq id)`` entries of a digest file; a torn final entry is ignored."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % DIGEST_ENTRY.size
    return [(int(h), int(s)) for h, s in DIGEST_ENTRY.iter_unpack(data[:whole])]


class DigestWriter:
    """Appends digest entries with plain writes: they survive the process being killed
    (the page cache keeps them); a power loss may cost the newest, which is harmless."""

    def __init__(self, path: Path, keep: int | None = None) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        if keep is not None:
            os.ftruncate(self._fd, keep * DIGEST_ENTRY.size)
        os.lseek(self._fd, 0, os.SEEK_END)

    def add(self, output_hash: int, seq_id: int) -> None:
        os.write(self._fd, DIGEST_ENTRY.pack(output_hash, seq_id))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ------------------------------------------------------------------ the lock


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
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
