"""Frames as bytes, sans-IO: the coordinator's hot paths pass RPCs through without
decoding them into message objects and encoding them again.

- ``outgoing_frames`` cuts a binding's outgoing-form RPC frames out of a read chunk and
  turns each into its incoming form by slicing (drop the destination, fix the size).
  It stops at the first frame that is anything else, or odd in any way; the caller hands
  the rest of the stream to the general decoder, which says what is wrong.
  ``batch_frames`` does the same for the RPCs inside a whole ``RpcBatch`` frame.
- ``LinkRecords`` reads a link's records: each header and its check bytes are verified,
  and the body is walked frame by frame (every frame must be a well-formed incoming-form
  RPC) but kept as the bytes that arrived.

A frame is only accepted here if re-encoding its decoded form would give the same bytes
(minimal varints): the replay digest hashes the frame as it arrived, and must agree with
a digest written from decoded messages. ``tests/ic/test_frames.py`` checks both paths
against the wire codec on the same inputs. The per-frame loops are the codec's
(``outgoing_frames``, ``incoming_frame_count``: compiled when built, pure otherwise,
``tests/wire/test_compiled.py`` holds the two together).
"""

from __future__ import annotations

from typing import NamedTuple

from ambrosia_core.errors import (
    ChecksumMismatchError,
    FrameTooLargeError,
    RemoteProtocolError,
    UnexpectedMessageError,
    VarintError,
    WireFormatError,
)
from ambrosia_core.wire import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_SIZE,
    Incomplete,
    check_bytes,
    decode_zz32,
)
from ambrosia_core.wire.fastpaths import incoming_frame_count
from ambrosia_core.wire.fastpaths import outgoing_frames as _outgoing_frames
from ambrosia_core.wire.outgoing import OutgoingFrame
from ambrosia_core.wire.records import HEADER

__all__ = ["MAX_LINK_RECORD", "LinkRecord", "LinkRecords", "OutgoingFrame", "batch_frames",
           "outgoing_frames", "rpc_frame_count", "skip_frames"]

#: The largest link record a receiver accepts: a sender cuts a record once its calls
#: reach 1 MiB, so one holds at most that plus one call of the largest frame size.
MAX_LINK_RECORD = DEFAULT_MAX_FRAME_SIZE + (2 << 20)
_RPC = 0  # MessageType.RPC
_RPC_BATCH = 5  # MessageType.RPC_BATCH


def _zz32(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """The codec's ``decode_zz32`` at ``pos`` of a ZigZagInt that must end by ``end``:
    ``(value, next_pos)``, or None (cut short, too long, not minimal, past int32)."""
    try:
        got = decode_zz32(buf, pos)
    except (Incomplete, VarintError):
        return None
    return got if got[1] <= end else None


def outgoing_frames(buf: bytes, pos: int, limit: int,
                    names: dict[bytes, str],
                    stop: int | None = None) -> tuple[list[OutgoingFrame], int]:
    """The whole outgoing-form RPC frames of at most ``limit`` bytes at ``buf[pos:stop]``
    (destination names of at most 63 bytes), and where they stop. ``names`` caches
    decoded destination names (bounded: destinations are few). The codec's loop, compiled
    when built."""
    out: list[OutgoingFrame] = []
    pos = _outgoing_frames(buf, pos, len(buf) if stop is None else stop, limit, names, out)
    return out, pos


def batch_frames(buf: bytes, pos: int, limit: int,
                 names: dict[bytes, str]) -> tuple[list[OutgoingFrame], int] | None:
    """The RPCs of the whole ``RpcBatch`` frame at ``buf[pos:]`` and where it ends, or
    None if there is none there or anything about it is odd (the general decoder then
    reads it and says what is wrong). Its RPCs are cut out as ``outgoing_frames`` cuts
    single ones, so each is handled, and hashed for the digest, as if sent alone."""
    sized = _zz32(buf, pos, len(buf))
    if sized is None or not 0 < sized[0] <= limit:
        return None
    hdr = sized[1]
    end = hdr + sized[0]
    if end > len(buf) or buf[hdr] != _RPC_BATCH:
        return None
    counted = _zz32(buf, hdr + 1, end)
    if counted is None or counted[0] <= 0:
        return None
    got, at = outgoing_frames(buf, counted[1], limit, names, end)
    if at != end or len(got) != counted[0]:
        return None
    return got, end


def rpc_frame_count(body: bytes, what: str) -> int:
    """How many frames ``body`` holds; each must be a well-formed incoming-form RPC.

    Raises:
        WireFormatError: a frame that does not parse.
        UnexpectedMessageError: a frame that is not an RPC.
    """
    count, pos = incoming_frame_count(body, 0, len(body))
    if pos == len(body):
        return count
    return _checked_frame_count(body, what)


def _checked_frame_count(body: bytes, what: str) -> int:
    """``rpc_frame_count`` frame by frame, saying what is wrong with the first bad one
    (the codec's count stops there without a word)."""
    pos = 0
    end = len(body)
    count = 0
    while pos < end:
        sized = _zz32(body, pos, end)
        if sized is None or sized[0] < 2 or sized[1] + sized[0] > end:
            raise WireFormatError(f"{what}: frame {count} does not parse")
        hdr, frame_end = sized[1], sized[1] + sized[0]
        if body[hdr] != _RPC:
            raise UnexpectedMessageError(f"{what}: frame {count} is type {body[hdr]}, not an RPC")
        if not body[hdr + 1]:
            got = _zz32(body, hdr + 2, frame_end)
            if got is None or got[1] >= frame_end or body[got[1]] > 2:
                raise WireFormatError(f"{what}: RPC {count} does not parse")
        count += 1
        pos = frame_end
    return count


def skip_frames(body: bytes, k: int) -> bytes:
    """``body`` without its first ``k`` frames (a body ``rpc_frame_count`` accepted)."""
    pos = 0
    for _ in range(k):
        sized = _zz32(body, pos, len(body))
        assert sized is not None, "skip_frames on a body that was not checked"
        pos = sized[1] + sized[0]
    return body[pos:]


class LinkRecord(NamedTuple):
    seq_id: int  # the link number of the last RPC in ``body`` (-1: unnumbered Impulses)
    body: bytes  # incoming-form RPC frames, as they arrived
    calls: int  # how many


class LinkRecords:
    """A link's record stream, fed bytes; ``records()`` returns the whole ones.

    After an error every later call raises it again: the link is to be closed.
    """

    def __init__(self, max_record: int = MAX_LINK_RECORD) -> None:
        self.max_record = max_record
        self._buf = bytearray()
        self._error: RemoteProtocolError | None = None

    @property
    def partial(self) -> bool:
        """Whether bytes of a record not yet complete are buffered."""
        return bool(self._buf)

    def receive_data(self, data: bytes) -> list[LinkRecord]:
        """Buffer ``data``; the records it completes.

        Raises:
            RemoteProtocolError: bad framing, length or check bytes (``WireFormatError``
                and its kinds), or a frame that is not an RPC (``UnexpectedMessageError``).
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        out: list[LinkRecord] = []
        pos = 0
        n = len(buf)
        try:
            while n - pos >= HEADER_SIZE:
                _, length, check, seq = HEADER.unpack_from(buf, pos)
                if length < HEADER_SIZE:
                    raise WireFormatError(f"link record length {length} is too small")
                if length > self.max_record:
                    raise FrameTooLargeError(
                        f"link record of {length} bytes exceeds {self.max_record}")
                if n - pos < length:
                    break
                body = bytes(buf[pos + HEADER_SIZE : pos + length])
                if check_bytes(body) != check:
                    raise ChecksumMismatchError("link record check bytes do not match",
                                                seq_id=seq)
                if seq < -1:
                    raise WireFormatError(f"link record sequence id {seq}")
                count = rpc_frame_count(body, f"link record {seq}")
                if not count:
                    raise WireFormatError(f"link record {seq} holds no RPC")
                out.append(LinkRecord(seq, body, count))
                pos += length
        except RemoteProtocolError as err:
            self._error = err
            raise
        del buf[:pos]
        return out
