"""The byte layout of each frame: ``encode_frame`` and ``decode_frame``, sans-IO.

Every frame is ``U32 length | U8 tag | body`` where the length counts the tag and the body.
Every integer is big-endian (the protocol document's remark on little-endian is wrong; real
peers are big-endian throughout). ``short_bytes`` is ``U16 length | bytes``.
``encode_frame`` turns a frame into its bytes; ``decode_frame`` turns one frame's tag and
body (as ``FrameReader`` cuts them) into a frame object or raises ``FrameFormatError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .errors import FrameFormatError, UnknownFrameTypeError
from .fields import (
    U16_MAX,
    U32,
    U32_MAX,
    U64,
    FieldReader,
    short_bytes,
    short_text,
)
from .frames import (
    Ack,
    EosMessage,
    ErrorFrame,
    Frame,
    FrameTag,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
    OkCredit,
    OkSource,
    Restart,
    frame_tag_of,
)

__all__ = ["decode_frame", "encode_body", "encode_frame"]

_LEN_TAG = struct.Struct(">IB")
_NOTIFY_ACK = struct.Struct(">BQQ")
_MESSAGE_HEAD = struct.Struct(">QQqH")
_U64_PAIR = struct.Struct(">QQ")
_U32_PAIR = struct.Struct(">II")


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
    return _LEN_TAG.pack(len(body) + 1, frame_tag_of(frame)) + body


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
