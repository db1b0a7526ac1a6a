"""The frames of the Wallaroo connector protocol v3, sans-IO: what each one holds.

The frames are small frozen classes whose constructors validate, so a frame that exists
can always be encoded; equality sees the class, so two frames with the same fields but
different types are never equal. Their byte layout is in ``frame_codec`` (``encode_frame``,
``decode_frame``); cutting an incoming byte stream into frames is ``frame_reader``'s
``FrameReader``.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from .fields import (
    U32_MAX,
    U64_MAX,
    check_bool,
    check_bytes,
    check_i64,
    check_short_bytes,
    check_short_text,
    check_tuple_of,
    check_u32,
    check_u64,
    to_tuple,
)

__all__ = [
    "POINT_OF_REFERENCE_FROM_START",
    "U64_MAX",
    "Ack",
    "ConnectionClosed",
    "EosMessage",
    "ErrorFrame",
    "Frame",
    "FrameTag",
    "Hello",
    "Message",
    "Notify",
    "NotifyAck",
    "Ok",
    "OkCredit",
    "OkSource",
    "Restart",
    "frame_tag_of",
]

# Wallaroo's own source library reads this point of reference in NOTIFY_ACK as "from the
# start"; any other value makes it seek to exactly that offset.
POINT_OF_REFERENCE_FROM_START: Final = U64_MAX


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
