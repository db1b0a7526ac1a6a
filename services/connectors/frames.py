"""Frames of the Wallaroo connector protocol v3 and their byte layout, sans-IO.

Every frame is ``U32 length | U8 tag | body`` where the length counts the tag and the body.
Every integer is big-endian (the protocol document's remark on little-endian is wrong; real
peers are big-endian throughout). ``short_bytes`` is ``U16 length | bytes``.

The frames are small frozen classes whose constructors validate, so a frame that exists
can always be encoded; equality sees the class, so two frames with the same fields but
different types are never equal. ``encode_frame`` turns one into bytes, ``FrameReader``
cuts an incoming byte stream into frames (input split at any byte, a length over the
bound rejected as soon as its four bytes arrive), ``decode_frame`` turns one frame's tag
and body into a frame object or raises ``FrameFormatError``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Final

import attrs

from ambrosia_py.wire import NEED_DATA, NeedData

from .errors import FrameFormatError, FrameTooLargeError, UnknownFrameTypeError
from .fields import (
    U16_MAX,
    U32,
    U32_MAX,
    U64,
    U64_MAX,
    FieldReader,
    check_bool,
    check_bytes,
    check_i64,
    check_short_bytes,
    check_short_text,
    check_tuple_of,
    check_u32,
    check_u64,
    short_bytes,
    short_text,
    to_tuple,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "POINT_OF_REFERENCE_FROM_START",
    "U64_MAX",
    "Ack",
    "ConnectionClosed",
    "EosMessage",
    "ErrorFrame",
    "Frame",
    "FrameReader",
    "FrameTag",
    "Hello",
    "Message",
    "Notify",
    "NotifyAck",
    "Ok",
    "OkCredit",
    "OkSource",
    "RawFrame",
    "Restart",
    "decode_frame",
    "encode_frame",
    "frame_tag_of",
]

DEFAULT_MAX_FRAME_SIZE: Final = 4 * 1024 * 1024
# Wallaroo's own source library reads this point of reference in NOTIFY_ACK as "from the
# start"; any other value makes it seek to exactly that offset.
POINT_OF_REFERENCE_FROM_START: Final = U64_MAX

_LEN_TAG = struct.Struct(">IB")
_NOTIFY_ACK = struct.Struct(">BQQ")
_MESSAGE_HEAD = struct.Struct(">QQqH")
_U64_PAIR = struct.Struct(">QQ")
_U32_PAIR = struct.Struct(">II")


class FrameTag(enum.IntEnum):
    """The frame type byte; the comment on each names who sends it (for sources)."""

    HELLO = 0  # connector -> worker
    OK = 1  # worker -> connector
    ERROR = 2  # either way
    NOTIFY = 3  # connector -> worker
    NOTIFY_ACK = 4  # worker -> connector
    MESSAGE = 5  # connector -> worker (and 2PC on stream 0 both ways, for sinks)
    ACK = 6  # worker -> connector
    RESTART = 7  # worker -> connector
    EOS_MESSAGE = 8  # connector -> worker


# ------------------------------------------------------------------ frames
@attrs.frozen
class Hello:
    """HELLO: opens a session. ``version`` and ``cookie`` are checked by the receiver."""

    version: str = attrs.field(validator=check_short_text)
    cookie: bytes = attrs.field(validator=check_short_bytes)
    program_name: str = attrs.field(validator=check_short_text)
    instance_name: str = attrs.field(validator=check_short_text)


@attrs.frozen
class OkCredit:
    """An entry of OK's optional per-stream list, as Wallaroo's own libraries define it."""

    stream_id: int = attrs.field(validator=check_u64)
    stream_name: str = attrs.field(validator=check_short_text)
    point_of_reference: int = attrs.field(validator=check_u64)


@attrs.frozen
class OkSource:
    """An entry of OK's optional source list (a source name and its address)."""

    name: str = attrs.field(validator=check_short_text)
    address: str = attrs.field(validator=check_short_text)


@attrs.frozen
class Ok:
    """OK: the handshake succeeded; ``initial_credits`` frames may be sent.

    Wallaroo's own connector libraries follow the credits with a U32-counted credit list
    and a U32-counted source list, and read both unconditionally, so this library always
    writes them (empty by default). Reading, the document's bare ``U32 credits`` and the
    credits-plus-credit-list form are accepted as well.
    """

    initial_credits: int = attrs.field(validator=check_u32)
    credit_list: tuple[OkCredit, ...] = attrs.field(
        default=(), converter=to_tuple, validator=check_tuple_of(OkCredit)
    )
    source_list: tuple[OkSource, ...] = attrs.field(
        default=(), converter=to_tuple, validator=check_tuple_of(OkSource)
    )


@attrs.frozen
class ErrorFrame:
    """ERROR: the sender gives up on the connection, for ``reason``."""

    reason: str = attrs.field(validator=check_short_text)


@attrs.frozen
class Notify:
    """NOTIFY: names stream ``stream_id`` and where the connector means to resume it."""

    stream_id: int = attrs.field(validator=check_u64)
    stream_name: str = attrs.field(validator=check_short_text)
    point_of_reference: int = attrs.field(default=0, validator=check_u64)


@attrs.frozen
class NotifyAck:
    """NOTIFY_ACK: ``success`` lets the connector send on the stream from
    ``point_of_reference``; a refusal means another connection holds the stream."""

    success: bool = attrs.field(validator=check_bool)
    stream_id: int = attrs.field(validator=check_u64)
    point_of_reference: int = attrs.field(validator=check_u64)


@attrs.frozen
class Message:
    """MESSAGE: one application message. ``key`` b"" means no key; the payload is the
    rest of the frame. Real peers send no flags byte (the document's form has one)."""

    stream_id: int = attrs.field(validator=check_u64)
    message_id: int = attrs.field(validator=check_u64)
    payload: bytes = attrs.field(default=b"", validator=check_bytes)
    event_time: int = attrs.field(default=0, validator=check_i64)
    key: bytes = attrs.field(default=b"", validator=check_short_bytes)


@attrs.frozen
class Ack:
    """ACK: ``credits`` more frames may be sent; each ``(stream_id, point_of_reference)``
    says everything on that stream before the point of reference is processed."""

    credits: int = attrs.field(validator=check_u32)
    acks: tuple[tuple[int, int], ...] = attrs.field(
        default=(), converter=to_tuple, validator=lambda _i, _a, v: _check_acks(v)
    )


def _check_acks(value: object) -> None:
    if type(value) is not tuple:
        raise TypeError(f"Ack.acks must be a tuple of (stream id, PoR) pairs, got {value!r}")
    if len(value) > U32_MAX:
        raise ValueError(f"Ack.acks has over {U32_MAX} items")
    for pair in value:
        if (
            type(pair) is not tuple
            or len(pair) != 2
            or not all(type(n) is int and 0 <= n <= U64_MAX for n in pair)
        ):
            raise ValueError(f"Ack.acks entries must be pairs of U64 ints, got {pair!r}")


@attrs.frozen
class Restart:
    """RESTART: the connector must close and reconnect (to ``address`` when given)."""

    address: str = attrs.field(default="", validator=check_short_text)


@attrs.frozen
class EosMessage:
    """EOS_MESSAGE: stream ``stream_id`` ends (it may be NOTIFYed again later). Real peers
    send the stream id only, although the document shows a message id too."""

    stream_id: int = attrs.field(validator=check_u64)


@attrs.frozen
class ConnectionClosed:
    """The peer closed the connection at a frame boundary (not a frame; no bytes)."""


Frame = Hello | Ok | ErrorFrame | Notify | NotifyAck | Message | Ack | Restart | EosMessage

_TAG_OF: dict[type, FrameTag] = {
    Hello: FrameTag.HELLO,
    Ok: FrameTag.OK,
    ErrorFrame: FrameTag.ERROR,
    Notify: FrameTag.NOTIFY,
    NotifyAck: FrameTag.NOTIFY_ACK,
    Message: FrameTag.MESSAGE,
    Ack: FrameTag.ACK,
    Restart: FrameTag.RESTART,
    EosMessage: FrameTag.EOS_MESSAGE,
}


def frame_tag_of(frame: Frame) -> FrameTag:
    """The tag byte of ``frame``'s type. Raises ``TypeError`` for a non-frame."""
    tag = _TAG_OF.get(type(frame))
    if tag is None:
        raise TypeError(f"{frame!r} is not a connector protocol frame")
    return tag


# ------------------------------------------------------------------ encoding
def encode_body(frame: Frame) -> bytes:
    """The bytes after the tag for ``frame``.

    Raises:
        TypeError: ``frame`` is not a frame.
    """
    match frame:
        case Message(stream_id, message_id, payload, event_time, key):
            return _MESSAGE_HEAD.pack(stream_id, message_id, event_time, len(key)) + key + payload
        case Ack(credits, acks):
            pairs = b"".join(_U64_PAIR.pack(s, p) for s, p in acks)
            return _U32_PAIR.pack(credits, len(acks)) + pairs
        case Hello(version, cookie, program_name, instance_name):
            return (
                short_text(version)
                + short_bytes(cookie)
                + short_text(program_name)
                + short_text(instance_name)
            )
        case Ok(initial_credits, credit_list, source_list):
            entries = b"".join(
                U64.pack(c.stream_id) + short_text(c.stream_name) + U64.pack(c.point_of_reference)
                for c in credit_list
            )
            sources = b"".join(short_text(s.name) + short_text(s.address) for s in source_list)
            return (
                _U32_PAIR.pack(initial_credits, len(credit_list))
                + entries
                + U32.pack(len(source_list))
                + sources
            )
        case ErrorFrame(reason):
            return short_text(reason)
        case Notify(stream_id, stream_name, point_of_reference):
            return U64.pack(stream_id) + short_text(stream_name) + U64.pack(point_of_reference)
        case NotifyAck(success, stream_id, point_of_reference):
            return _NOTIFY_ACK.pack(1 if success else 0, stream_id, point_of_reference)
        case Restart(address):
            raw = address.encode("utf-8")
            return U32.pack(len(raw)) + raw
        case EosMessage(stream_id):
            return U64.pack(stream_id)
    raise TypeError(f"{frame!r} is not a connector protocol frame")


def encode_frame(frame: Frame) -> bytes:
    """The whole frame on the wire: length, tag and body.

    Raises:
        TypeError: ``frame`` is not a frame.
        ValueError: the frame would be longer than a U32 length can say.
    """
    body = encode_body(frame)
    if len(body) + 1 > U32_MAX:
        raise ValueError(f"a {type(frame).__name__} of {len(body)} bytes cannot be framed")
    return _LEN_TAG.pack(len(body) + 1, _TAG_OF[type(frame)]) + body


# ------------------------------------------------------------------ decoding
def _decode_hello(r: FieldReader) -> Hello:
    version = r.short_text("version")
    cookie = r.short_bytes("cookie")
    return Hello(version, cookie, r.short_text("program name"), r.short_text("instance name"))


def _decode_ok(r: FieldReader) -> Ok:
    credits = r.u32("initial credits")
    credit_list: list[OkCredit] = []
    source_list: list[OkSource] = []
    if r.remaining:  # the document's form stops after the credits
        for _ in range(r.count("credit list entries", 8 + 2 + 8)):
            sid = r.u64("credit stream id")
            name = r.short_text("credit stream name")
            credit_list.append(OkCredit(sid, name, r.u64("credit point of reference")))
        if r.remaining:
            for _ in range(r.count("source list entries", 2 + 2)):
                name = r.short_text("source name")
                source_list.append(OkSource(name, r.short_text("source address")))
    return Ok(credits, tuple(credit_list), tuple(source_list))


def _decode_error(r: FieldReader) -> ErrorFrame:
    return ErrorFrame(r.short_text("reason"))


def _decode_notify(r: FieldReader) -> Notify:
    sid = r.u64("stream id")
    name = r.short_text("stream name")
    return Notify(sid, name, r.u64("point of reference"))


def _decode_notify_ack(r: FieldReader) -> NotifyAck:
    flag = r.u8("success")
    if flag > 1:
        raise FrameFormatError(f"{r.what}: success byte must be 0 or 1, got {flag}")
    sid = r.u64("stream id")
    return NotifyAck(flag == 1, sid, r.u64("point of reference"))


def _decode_message(r: FieldReader) -> Message:
    head = r.take(_MESSAGE_HEAD.size, "stream id, message id, event time and key length")
    sid, mid, event_time, key_len = _MESSAGE_HEAD.unpack(head)
    key = r.take(key_len, "key")
    return Message(sid, mid, r.rest(), event_time, key)


def _decode_ack(r: FieldReader) -> Ack:
    credits = r.u32("credits")
    n = r.count("acks", 16)
    acks = tuple(_U64_PAIR.unpack(r.take(16, "ack")) for _ in range(n))
    return Ack(credits, acks)


def _decode_restart(r: FieldReader) -> Restart:
    if not r.remaining:  # an empty body is accepted: no address
        return Restart()
    raw = r.take(r.u32("address length"), "address")
    if len(raw) > U16_MAX:  # this library keeps addresses to short_bytes size
        raise FrameFormatError(f"{r.what}: address of {len(raw)} bytes is too long")
    return Restart(r.text(raw, "address"))


def _decode_eos(r: FieldReader) -> EosMessage:
    return EosMessage(r.u64("stream id"))


_DECODERS: dict[FrameTag, Callable[[FieldReader], Frame]] = {
    FrameTag.HELLO: _decode_hello,
    FrameTag.OK: _decode_ok,
    FrameTag.ERROR: _decode_error,
    FrameTag.NOTIFY: _decode_notify,
    FrameTag.NOTIFY_ACK: _decode_notify_ack,
    FrameTag.MESSAGE: _decode_message,
    FrameTag.ACK: _decode_ack,
    FrameTag.RESTART: _decode_restart,
    FrameTag.EOS_MESSAGE: _decode_eos,
}


def decode_frame(tag: int, body: bytes) -> Frame:
    """The frame with tag byte ``tag`` and the bytes after it.

    Raises:
        UnknownFrameTypeError: ``tag`` is not a frame type.
        FrameFormatError: the body is cut short, too long, or holds bad UTF-8.
    """
    try:
        known = FrameTag(tag)
    except ValueError:
        raise UnknownFrameTypeError(f"unknown frame type {tag}", message_type=tag) from None
    r = FieldReader(body, known.name)
    frame = _DECODERS[known](r)
    r.end()
    return frame


# ------------------------------------------------------------------ framing
@attrs.frozen
class RawFrame:
    """One whole frame cut from the stream: where it began, its tag and its body."""

    offset: int
    tag: int
    body: bytes


class FrameReader:
    """Cuts a byte stream into frames, whatever the input's split.

    ``receive_data`` buffers; ``next_frame`` returns a ``RawFrame`` or ``NEED_DATA``. A
    length over ``max_frame_size`` is refused as soon as its four bytes have arrived:
    the frames before it are still returned, then ``next_frame`` raises
    ``FrameTooLargeError``, and nothing after that length is kept. After an error every
    call raises it again.

    Args:
        max_frame_size: the largest length field accepted (it counts tag and body).
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not 1 <= max_frame_size <= U32_MAX:
            raise ValueError(f"max_frame_size must be in [1, {U32_MAX}], got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0  # start of the next frame in _buf
        self._base = 0  # stream offset of _buf[0]
        self._scanned = 0  # index in _buf of the first frame length not yet checked
        self._poison: FrameTooLargeError | None = None  # an oversized length, not yet raised
        self._error: FrameFormatError | None = None

    @property
    def offset(self) -> int:
        """Stream offset of the next frame to return."""
        return self._base + self._pos

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._pos

    @property
    def at_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean place for the stream to end)."""
        return self.buffered == 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes from the peer; bytes after an oversized length are dropped."""
        if self._error is not None:
            raise self._error
        if self._poison is not None or not data:
            return
        if self._pos and self._pos * 2 >= len(self._buf):
            # Drop what was consumed once it is at least half the buffer: each byte is
            # moved a bounded number of times, however the input is split.
            del self._buf[: self._pos]
            self._base += self._pos
            self._scanned -= self._pos
            self._pos = 0
        self._buf += data
        self._check_lengths()

    def _check_lengths(self) -> None:
        """Check each frame length that has fully arrived, so that an oversized frame is
        refused before its body is buffered."""
        buf = self._buf
        pos = self._scanned
        while pos + 4 <= len(buf):
            (length,) = U32.unpack_from(buf, pos)
            if length > self.max_frame_size:
                self._poison = FrameTooLargeError(
                    f"frame of {length} bytes is over the {self.max_frame_size}-byte limit",
                    offset=self._base + pos,
                )
                del buf[pos + 4 :]
                break
            pos += 4 + length
        self._scanned = pos

    def next_frame(self) -> RawFrame | NeedData:
        """The next whole frame, or ``NEED_DATA``.

        Raises:
            FrameTooLargeError: the next frame's length is over the limit.
            FrameFormatError: the next frame's length is zero (no room for a tag).
        """
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return NEED_DATA
        (length,) = U32.unpack_from(buf, pos)
        if length > self.max_frame_size and self._poison is not None:
            self._fail(self._poison)
        if length == 0:
            self._fail(
                FrameFormatError("frame length 0 leaves no room for a tag", offset=self.offset)
            )
        end = pos + 4 + length
        if len(buf) < end:
            return NEED_DATA
        frame = RawFrame(self._base + pos, buf[pos + 4], bytes(buf[pos + 5 : end]))
        self._pos = end
        return frame

    def _fail(self, err: FrameFormatError) -> None:
        self._error = err
        self._buf.clear()
        self._pos = 0
        raise err
