"""ØMQ RAFT frames without I/O: the frame types, log entries, request ids, and the
request and response messages a client sends and reads.

Every function here takes and returns bytes (or lists of frames); nothing opens a
socket. Bad frames from a peer raise ``RaftProtocolError`` naming the frame; a value this
side cannot encode raises ``EncodeError``.

Frame types (all integers least significant byte first):

- ``uint``: 1..8 bytes, an empty frame is an error; ``nuint``: the same, empty is None;
  ``uint32``: 1..4 bytes.
- ``bool``: true when the frame has a first byte that is not 0.
- ``json``: a MessagePack value.
- ``reqid``: 12 bytes: seconds since the epoch (4, big-endian), machine (3), process (2),
  counter (3, starting at random).
- ``entry``: reqid, a type byte (0 state, 1 config, 2 checkpoint), the term in 7 bytes,
  then the data.
"""

from __future__ import annotations

import enum
import os
import secrets
import time
from collections.abc import Sequence
from typing import Any

import attrs
import msgpack

from ambrosia_core.errors import EncodeError

from .errors import RaftProtocolError

__all__ = [
    "CONFIG_UPDATE",
    "REQUEST_BROADCAST_STATE_URL",
    "REQUEST_CONFIG",
    "REQUEST_ENTRIES",
    "REQUEST_LOG_INFO",
    "REQUEST_UPDATE",
    "ConfigReply",
    "EntriesReply",
    "EntriesStatus",
    "EntryType",
    "LogEntry",
    "LogInfo",
    "RequestIds",
    "SnapshotChunk",
    "StateBroadcast",
    "UpdateReply",
    "decode_bool",
    "decode_entry",
    "decode_json",
    "decode_nuint",
    "decode_uint",
    "decode_uint32",
    "encode_bool",
    "encode_entry",
    "encode_json",
    "encode_nuint",
    "encode_uint",
    "encode_uint32",
    "parse_broadcast",
    "parse_broadcast_url",
    "parse_config",
    "parse_entries",
    "parse_log_info",
    "parse_update",
    "request_id_time",
]

REQUEST_UPDATE = b"\x3d"  # '='
CONFIG_UPDATE = b"\x26"  # '&'
REQUEST_ENTRIES = b"\x3c"  # '<'
REQUEST_CONFIG = b"\x5e"  # '^'
REQUEST_LOG_INFO = b"\x25"  # '%'
REQUEST_BROADCAST_STATE_URL = b"\x2a"  # '*'

REQID_SIZE = 12
ENTRY_HEADER = REQID_SIZE + 1 + 7
_MAX_UINT = (1 << 64) - 1
_MAX_TERM = (1 << 56) - 1


# ---------------------------------------------------------------------- integers
def encode_uint(n: int) -> bytes:
    """The shortest little-endian form (at least one byte) of ``0 <= n < 2**64``."""
    if not isinstance(n, int) or not 0 <= n <= _MAX_UINT:
        raise EncodeError(f"uint frame value {n!r} is not in 0..2**64-1")
    return n.to_bytes(max(1, (n.bit_length() + 7) // 8), "little")


def encode_nuint(n: int | None) -> bytes:
    return b"" if n is None else encode_uint(n)


def encode_uint32(n: int) -> bytes:
    if not isinstance(n, int) or not 0 <= n < 1 << 32:
        raise EncodeError(f"uint32 frame value {n!r} is not in 0..2**32-1")
    return encode_uint(n)


def decode_uint(frame: bytes, what: str = "uint") -> int:
    if not 1 <= len(frame) <= 8:
        raise RaftProtocolError(f"{what}: a uint frame of {len(frame)} bytes (1..8 expected)")
    return int.from_bytes(frame, "little")


def decode_nuint(frame: bytes, what: str = "nuint") -> int | None:
    return None if not frame else decode_uint(frame, what)


def decode_uint32(frame: bytes, what: str = "uint32") -> int:
    if not 1 <= len(frame) <= 4:
        raise RaftProtocolError(f"{what}: a uint32 frame of {len(frame)} bytes (1..4 expected)")
    return int.from_bytes(frame, "little")


def encode_bool(value: bool) -> bytes:
    return b"\x01" if value else b""


def decode_bool(frame: bytes) -> bool:
    return bool(frame) and frame[0] != 0


def encode_json(value: Any) -> bytes:
    try:
        return bytes(msgpack.packb(value, use_bin_type=True))
    except (TypeError, ValueError, OverflowError) as err:
        raise EncodeError(f"a json frame cannot hold {value!r}: {err}") from None


def decode_json(frame: bytes, what: str = "json") -> Any:
    try:
        return msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as err:  # msgpack raises several unrelated types
        raise RaftProtocolError(f"{what}: not a MessagePack value ({err})") from None


# ---------------------------------------------------------------------- request ids
class RequestIds:
    """Makes unique 12-byte request ids: the time, this machine, this process, and a
    counter that starts at random (so two processes started in one second differ)."""

    def __init__(self, machine: bytes | None = None, pid: int | None = None) -> None:
        self._machine = (machine if machine is not None else secrets.token_bytes(3))[:3]
        if len(self._machine) != 3:
            raise EncodeError("a request id's machine part is 3 bytes")
        self._pid = (os.getpid() if pid is None else pid) & 0xFFFF
        self._counter = secrets.randbits(24)

    def new(self, at: float | None = None) -> bytes:
        """A fresh id; ``at`` (seconds since the epoch) dates it, now by default."""
        self._counter = (self._counter + 1) & 0xFFFFFF
        seconds = int(time.time() if at is None else at) & 0xFFFFFFFF
        return (seconds.to_bytes(4, "big") + self._machine + self._pid.to_bytes(2, "big")
                + self._counter.to_bytes(3, "big"))


def request_id_time(reqid: bytes) -> int:
    """The seconds since the epoch a request id was made at."""
    return int.from_bytes(reqid[:4], "big")


# ---------------------------------------------------------------------- log entries
class EntryType(enum.IntEnum):
    STATE = 0
    CONFIG = 1
    CHECKPOINT = 2


@attrs.frozen
class LogEntry:
    """One entry of the cluster's log (``index`` is where it was read, 0 if unknown)."""

    reqid: bytes
    type: EntryType
    term: int
    data: bytes
    index: int = 0


def encode_entry(reqid: bytes, etype: int, term: int, data: bytes) -> bytes:
    if len(reqid) != REQID_SIZE:
        raise EncodeError(f"a request id is {REQID_SIZE} bytes, got {len(reqid)}")
    if not 0 <= term <= _MAX_TERM:
        raise EncodeError(f"a log entry term {term} does not fit 7 bytes")
    return reqid + bytes([etype]) + term.to_bytes(7, "little") + data


def decode_entry(frame: bytes, index: int = 0) -> LogEntry:
    if len(frame) < ENTRY_HEADER:
        raise RaftProtocolError(f"a log entry of {len(frame)} bytes (at least "
                                f"{ENTRY_HEADER} expected)")
    try:
        etype = EntryType(frame[REQID_SIZE])
    except ValueError:
        raise RaftProtocolError(f"log entry type {frame[REQID_SIZE]} is unknown") from None
    term = int.from_bytes(frame[REQID_SIZE + 1 : ENTRY_HEADER], "little")
    return LogEntry(bytes(frame[:REQID_SIZE]), etype, term, bytes(frame[ENTRY_HEADER:]), index)


# ---------------------------------------------------------------------- responses
def _need(frames: Sequence[bytes], n: int, what: str) -> None:
    if len(frames) < n:
        raise RaftProtocolError(f"{what}: {len(frames)} frames where at least {n} are due")


def _leader_id(frame: bytes, what: str) -> str | None:
    value = decode_json(frame, what) if frame else None
    if value is not None and not isinstance(value, str):
        raise RaftProtocolError(f"{what}: the leader id {value!r} is not a string")
    return value


@attrs.frozen
class ConfigReply:
    is_leader: bool
    leader_id: str | None
    peers: tuple[tuple[str, str], ...]


def _peers(value: Any, what: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
            for p in value):
        raise RaftProtocolError(f"{what}: the peer list is not [[id, url], ...]")
    return tuple((p[0], p[1]) for p in value)


def parse_config(frames: Sequence[bytes]) -> ConfigReply:
    """A RequestConfig response, without its request id frame."""
    _need(frames, 2, "RequestConfig")
    peers: tuple[tuple[str, str], ...] = ()
    if len(frames) > 2:
        peers = _peers(decode_json(frames[2], "RequestConfig peers"), "RequestConfig")
    return ConfigReply(decode_bool(frames[0]), _leader_id(frames[1], "RequestConfig"), peers)


@attrs.frozen
class UpdateReply:
    """A RequestUpdate (or ConfigUpdate) response.

    ``status``: for RequestUpdate 1 (accepted or committed) or 0 (refused); for
    ConfigUpdate one of 0..4. ``index`` is the committed log index once final;
    ``leader_id`` names the leader in a refusal; ``error`` is a ConfigUpdate's argument
    error.
    """

    status: int
    index: int | None = None
    leader_id: str | None = None
    error: Any = None
    has_detail: bool = False  # whether the optional third frame came


def parse_update(frames: Sequence[bytes], *, config: bool = False) -> UpdateReply:
    """A RequestUpdate or ConfigUpdate response, without its request id frame."""
    what = "ConfigUpdate" if config else "RequestUpdate"
    _need(frames, 1, what)
    status = (decode_uint(frames[0], what) if config and frames[0]
              else int(decode_bool(frames[0])))
    if len(frames) < 2:
        return UpdateReply(status)
    if status == 0:
        return UpdateReply(0, leader_id=_leader_id(frames[1], what), has_detail=True)
    value = decode_json(frames[1], what)
    if status == 1:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise RaftProtocolError(f"{what}: committed index {value!r} is not a number")
        return UpdateReply(1, index=value, has_detail=True)
    return UpdateReply(status, error=value, has_detail=True)


class EntriesStatus(enum.IntEnum):
    NOT_LEADER = 0
    LAST = 1
    MORE = 2
    SNAPSHOT = 3


@attrs.frozen
class SnapshotChunk:
    offset: int
    total: int
    term: int
    data: bytes

    @property
    def last(self) -> bool:
        return self.offset + len(self.data) >= self.total


@attrs.frozen
class EntriesReply:
    """One RequestEntries response: ``last_index`` is the index of the last entry (or
    snapshot chunk) in it; ``entries`` carry their indexes."""

    status: EntriesStatus
    leader_id: str | None = None
    last_index: int = 0
    entries: tuple[LogEntry, ...] = ()
    chunk: SnapshotChunk | None = None


def parse_entries(frames: Sequence[bytes]) -> EntriesReply:
    """A RequestEntries response, without its request id frame."""
    _need(frames, 1, "RequestEntries")
    try:
        status = EntriesStatus(decode_uint(frames[0], "RequestEntries status"))
    except ValueError:
        raise RaftProtocolError(f"RequestEntries: unknown status {frames[0].hex()}") from None
    if status is EntriesStatus.NOT_LEADER:
        return EntriesReply(status, _leader_id(frames[1], "RequestEntries")
                            if len(frames) > 1 else None)
    _need(frames, 3, "RequestEntries")
    last = decode_uint(frames[2], "RequestEntries last index")
    if status is EntriesStatus.SNAPSHOT:
        _need(frames, 4, "RequestEntries snapshot")
        info = decode_json(frames[1], "RequestEntries snapshot info")
        if not (isinstance(info, list) and len(info) == 3 and all(
                isinstance(x, int) and x >= 0 for x in info)):
            raise RaftProtocolError("RequestEntries: snapshot info is not [offset, size, term]")
        return EntriesReply(status, last_index=last,
                            chunk=SnapshotChunk(info[0], info[1], info[2], bytes(frames[3])))
    body = frames[3:]
    first = last - len(body) + 1
    entries = tuple(decode_entry(f, first + i) for i, f in enumerate(body))
    return EntriesReply(status, last_index=last, entries=entries)


@attrs.frozen
class LogInfo:
    is_leader: bool
    leader_id: str | None
    term: int
    first_index: int
    last_applied: int
    commit_index: int
    last_index: int
    snapshot_size: int
    prune_index: int


def parse_log_info(frames: Sequence[bytes]) -> LogInfo:
    """A RequestLogInfo response, without its request id frame."""
    _need(frames, 9, "RequestLogInfo")
    nums = [decode_uint(f, "RequestLogInfo") for f in frames[2:9]]
    return LogInfo(decode_bool(frames[0]), _leader_id(frames[1], "RequestLogInfo"), *nums)


def parse_broadcast_url(frames: Sequence[bytes]) -> str | None:
    """A RequestBroadcastStateUrl response: the PUB url, or None (not the leader)."""
    if not frames or not frames[0]:
        return None
    try:
        return bytes(frames[0]).decode("utf-8")
    except UnicodeDecodeError:
        raise RaftProtocolError("RequestBroadcastStateUrl: the url is not UTF-8") from None


@attrs.frozen
class StateBroadcast:
    term: int
    last_applied: int
    entries: tuple[LogEntry, ...]


def parse_broadcast(frames: Sequence[bytes], secret: bytes) -> StateBroadcast:
    """A StateBroadcast message (its first frame is the cluster secret)."""
    _need(frames, 3, "StateBroadcast")
    if bytes(frames[0]) != secret:
        raise RaftProtocolError("StateBroadcast: from another cluster (its secret differs)")
    term = decode_uint(frames[1], "StateBroadcast term")
    last = decode_uint(frames[2], "StateBroadcast last applied")
    body = frames[3:]
    first = last - len(body) + 1
    return StateBroadcast(term, last, tuple(decode_entry(f, first + i)
                                            for i, f in enumerate(body)))

