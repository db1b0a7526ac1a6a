"""The log store's entries in a ØMQ RAFT cluster's log, without I/O: their bytes, and
the fold every reader applies to them (``InstanceView``), which is where fencing lives.

Each entry is one STATE entry of the cluster's log, for one instance (one cluster holds
many instances, and the registry)::

    "AM" version(1) kind(1) u16 name length, name (UTF-8), body

    E  epoch claim     i64 epoch, JSON holder info (replica, link port, ...)
    H  heartbeat       i64 epoch [, u8 1: its holder resigned the epoch]
    R  records         i64 epoch, u32 n, n x (u32 length, bytes): one group commit
    C  checkpoint part i64 epoch, u32 checkpoint number, u32 part number, bytes
    K  checkpoint end  i64 epoch, u32 number, u32 parts, u64 size, u64 XXH64 of the parts
    G  registration    JSON

All integers are little-endian. The rules, the same for every reader because the
cluster's log has one order:

- The first claim of epoch ``current + 1`` makes its holder the primary; any other
  claim (an older or equal epoch, or a jump) is ignored.
- Records, heartbeats and checkpoints of an epoch older than the current one are
  ignored: a paused old primary that appends after a newer claim is fenced, whatever
  it believes. Records of an epoch newer than the current one cannot be written by a
  correct writer: damage.
- A heartbeat of the current epoch that says its holder resigned (a primary that stops,
  e.g. when its binding died) lets a standby claim without waiting out the lease.
  Readers that predate it see a heartbeat.
- A checkpoint counts once its end entry came with all its parts; the newest complete
  checkpoint of a number wins (two of one number hold the same state, except for a
  first start tried again, whose newest try is the one that counts). Readers verify
  its check bytes before using it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from ambrosia_ic.errors import LogCorruptionError

__all__ = [
    "CheckpointEnd",
    "CheckpointPart",
    "EpochClaimed",
    "Fenced",
    "Heartbeat",
    "InstanceView",
    "Records",
    "Registered",
    "decode_store_entry",
    "encode_checkpoint_end",
    "encode_checkpoint_part",
    "encode_claim",
    "encode_heartbeat",
    "encode_records",
    "encode_registration",
]

MAGIC = b"AM\x01"
_NAME_LEN = struct.Struct("<H")
_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")
_PART = struct.Struct("<qII")
_END = struct.Struct("<qIIQQ")


def _head(kind: bytes, name: str) -> bytes:
    raw = name.encode("utf-8")
    return MAGIC + kind + _NAME_LEN.pack(len(raw)) + raw


def encode_claim(name: str, epoch: int, holder: dict[str, Any]) -> bytes:
    return _head(b"E", name) + _I64.pack(epoch) + json.dumps(holder).encode()


def encode_heartbeat(name: str, epoch: int, resign: bool = False) -> bytes:
    return _head(b"H", name) + _I64.pack(epoch) + (b"\x01" if resign else b"")


def encode_records(name: str, epoch: int, records: Sequence[bytes]) -> bytes:
    parts = [_head(b"R", name), _I64.pack(epoch), _U32.pack(len(records))]
    for r in records:
        parts += [_U32.pack(len(r)), r]
    return b"".join(parts)


def encode_checkpoint_part(name: str, epoch: int, number: int, part: int, data: bytes) -> bytes:
    return _head(b"C", name) + _PART.pack(epoch, number, part) + data


def encode_checkpoint_end(name: str, epoch: int, number: int, parts: int, size: int,
                          check: int) -> bytes:
    return _head(b"K", name) + _END.pack(epoch, number, parts, size, check)


def encode_registration(name: str, registration: dict[str, Any]) -> bytes:
    return _head(b"G", name) + json.dumps(registration, sort_keys=True).encode()


# ---------------------------------------------------------------------- events
@attrs.frozen
class EpochClaimed:
    index: int
    epoch: int
    holder: dict[str, Any]
    reqid: bytes


@attrs.frozen
class Heartbeat:
    index: int
    epoch: int
    resigned: bool = False


@attrs.frozen
class Records:
    """One committed group of records (opaque bytes each), in log order."""

    index: int
    epoch: int
    records: tuple[bytes, ...]


@attrs.frozen
class Fenced:
    """An entry of an older epoch that came after a newer claim: ignored by everyone."""

    index: int
    epoch: int
    kind: str


@attrs.frozen
class CheckpointPart:
    index: int
    epoch: int
    number: int
    part: int
    size: int


@attrs.frozen
class CheckpointEnd:
    """Checkpoint ``number`` is complete: its parts are at ``parts`` (log indexes)."""

    index: int
    number: int
    parts: tuple[int, ...]
    size: int
    check: int


@attrs.frozen
class Registered:
    index: int
    registration: dict[str, Any]


Event = EpochClaimed | Heartbeat | Records | Fenced | CheckpointPart | CheckpointEnd | Registered


def _damage(index: int, reason: str) -> LogCorruptionError:
    return LogCorruptionError("raft log", index, reason)


def decode_store_entry(data: bytes, index: int) -> tuple[str, str, bytes] | None:
    """``(kind, instance name, body)``, or None for an entry that is not the store's
    (other users of the cluster may share it).

    Raises:
        LogCorruptionError: the store's magic with a header that does not parse.
    """
    if not data.startswith(MAGIC):
        return None
    if len(data) < len(MAGIC) + 1 + _NAME_LEN.size:
        raise _damage(index, "a log store entry cut short in its header")
    kind = chr(data[3])
    (n,) = _NAME_LEN.unpack_from(data, 4)
    end = 6 + n
    if len(data) < end:
        raise _damage(index, "a log store entry cut short in its instance name")
    try:
        name = data[6:end].decode("utf-8")
    except UnicodeDecodeError:
        raise _damage(index, "an instance name that is not UTF-8") from None
    return kind, name, data[end:]


def _records(body: bytes, index: int) -> tuple[int, tuple[bytes, ...]]:
    if len(body) < 12:
        raise _damage(index, "a records entry cut short")
    (epoch,) = _I64.unpack_from(body, 0)
    (n,) = _U32.unpack_from(body, 8)
    pos = 12
    out = []
    for _ in range(n):
        if pos + 4 > len(body):
            raise _damage(index, "a records entry cut short in a length")
        (ln,) = _U32.unpack_from(body, pos)
        pos += 4
        if pos + ln > len(body):
            raise _damage(index, "a records entry cut short in a record")
        out.append(body[pos : pos + ln])
        pos += ln
    if pos != len(body):
        raise _damage(index, f"{len(body) - pos} bytes after the last record")
    return epoch, tuple(out)


class InstanceView:
    """One instance's state as the log says it, fed every committed entry in order.

    ``apply`` returns the events of one entry (none for other instances' entries);
    ``epoch`` and ``holder`` say who is primary (``claim_index`` is where it claimed);
    ``checkpoints`` maps each complete checkpoint number to its end event;
    ``entries_read`` counts the entries applied, every instance's.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.epoch = 0
        self.holder: dict[str, Any] = {}
        self.claim_reqid = b""
        self.claim_index = 0
        self.resigned = False  # the current epoch's holder said it stopped
        self.last_index = 0
        self.entries_read = 0
        self.checkpoints: dict[int, CheckpointEnd] = {}
        self.registration: dict[str, Any] | None = None
        self.record_count = 0  # records that count, in every Records event so far
        self.fenced_count = 0  # entries ignored because a newer epoch came first
        self._parts: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}

    def apply(self, index: int, reqid: bytes, data: bytes) -> list[Event]:
        if index <= self.last_index:
            return []  # read twice (a stream resumed): the first reading counted
        self.last_index = index
        self.entries_read += 1
        got = decode_store_entry(data, index)
        if got is None or got[1] != self.name:
            return []
        kind, _, body = got
        if kind == "G":
            try:
                reg = json.loads(body)
            except ValueError:
                raise _damage(index, "a registration that is not JSON") from None
            self.registration = reg
            return [Registered(index, reg)]
        if len(body) < 8:
            raise _damage(index, f"a {kind!r} entry without its epoch")
        (epoch,) = _I64.unpack_from(body, 0)
        if kind == "E":
            if epoch != self.epoch + 1:
                self.fenced_count += 1
                return [Fenced(index, epoch, kind)]
            try:
                holder = json.loads(body[8:])
            except ValueError:
                raise _damage(index, "an epoch claim whose holder is not JSON") from None
            self.epoch, self.holder, self.claim_reqid = epoch, holder, reqid
            self.claim_index = index
            self.resigned = False
            return [EpochClaimed(index, epoch, holder, reqid)]
        if epoch < self.epoch:
            self.fenced_count += 1
            return [Fenced(index, epoch, kind)]
        if epoch > self.epoch:
            raise _damage(index, f"a {kind!r} entry of epoch {epoch}, never claimed "
                          f"(the current epoch is {self.epoch})")
        if kind == "H":
            resigned = body[8:9] == b"\x01"
            self.resigned = self.resigned or resigned
            return [Heartbeat(index, epoch, resigned)]
        if kind == "R":
            records = _records(body, index)[1]
            self.record_count += len(records)
            return [Records(index, epoch, records)]
        if kind == "C":
            if len(body) < _PART.size:
                raise _damage(index, "a checkpoint part cut short")
            _, number, part = _PART.unpack_from(body, 0)
            size = len(body) - _PART.size
            self._parts.setdefault((epoch, number), {})[part] = (index, size)
            return [CheckpointPart(index, epoch, number, part, size)]
        if kind == "K":
            if len(body) != _END.size:
                raise _damage(index, "a checkpoint end of the wrong size")
            _, number, parts, size, check = _END.unpack(body)
            have = self._parts.pop((epoch, number), {})
            if sorted(have) != list(range(parts)) or sum(s for _, s in have.values()) != size:
                return []  # a writer that died half-way: not a checkpoint
            end = CheckpointEnd(index, number, tuple(have[p][0] for p in range(parts)),
                                size, check)
            self.checkpoints[number] = end
            return [end]
        raise _damage(index, f"unknown log store entry kind {kind!r}")

    def start_at_claim(self, index: int, epoch: int) -> None:
        """Skip the log before the claim of ``epoch`` at ``index``, one that a reader of
        the whole log found valid: from there on this view folds the entries as every
        reader does, since the claims before it are settled. Only the claims are right
        afterwards (records and checkpoints before ``index`` were never read): for a
        reader that only needs to know who is primary.
        """
        if self.last_index or index < 1 or epoch < 1:
            raise ValueError(f"cannot start a view at claim {epoch} at index {index}")
        self.last_index = index - 1
        self.epoch = epoch - 1

    def newest_checkpoint(self) -> CheckpointEnd | None:
        return self.checkpoints[max(self.checkpoints)] if self.checkpoints else None


def part_body(data: bytes) -> bytes:
    """The bytes of a checkpoint part entry (its header already validated)."""
    got = decode_store_entry(data, 0)
    assert got is not None
    return got[2][_PART.size:]


def chunked(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]
