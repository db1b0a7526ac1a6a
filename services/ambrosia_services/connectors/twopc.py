"""Two-phase-commit messages between a worker and a connector sink, and their order.

They travel inside MESSAGE frames on stream 0 (message id 0, event time 0, no key); the
MESSAGE payload is a 1-byte inner tag and the body, with no inner length. Who sends what,
with the sink link's roles (the side that sends HELLO is the connector role here):

- connector role (Wallaroo / the coordinator): 201 ListUncommitted, 203 Phase1,
  205 Phase2, 206 WorkersLeft;
- worker role (the sink): 202 ReplyUncommitted, 204 Reply.

``TwoPCSession`` holds the little order the protocol needs on one connection: a reply
answers a question that was asked, and no data MESSAGE travels while a round is open
(from Phase1 to the Phase2 of the same transaction). Phase2 needs no Phase1 on the same
connection, because after a reconnect a sink lists a transaction left after Phase1 and
Phase2 must still settle it. Phase2 gets no reply.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import attrs

from .errors import FrameFormatError, UnknownFrameTypeError
from .fields import (
    U32,
    U64,
    FieldReader,
    check_bool,
    check_short_text,
    check_tuple_of,
    check_tuple_of_text,
    check_u64,
    short_text,
    to_tuple,
)
from .frames import Message

__all__ = [
    "TWOPC_STREAM_ID",
    "ListUncommitted",
    "Phase1",
    "Phase2",
    "ReplyUncommitted",
    "TwoPCMessage",
    "TwoPCReply",
    "TwoPCSession",
    "TwoPCTag",
    "Where",
    "WorkersLeft",
    "decode_twopc",
    "encode_twopc",
    "twopc_message",
]

TWOPC_STREAM_ID: Final = 0
_WHERE = struct.Struct(">QQQ")


class TwoPCTag(enum.IntEnum):
    """The inner tag byte of a 2PC message."""

    LIST_UNCOMMITTED = 201  # worker -> sink (connector role)
    REPLY_UNCOMMITTED = 202  # sink -> worker
    PHASE1 = 203  # worker -> sink
    REPLY = 204  # sink -> worker
    PHASE2 = 205  # worker -> sink
    WORKERS_LEFT = 206  # worker -> sink


@attrs.frozen
class Where:
    """A byte range of one stream in a Phase1: ``start`` inclusive, ``end`` exclusive."""

    stream_id: int = attrs.field(validator=check_u64)
    start: int = attrs.field(validator=check_u64)
    end: int = attrs.field(validator=check_u64)


@attrs.frozen
class ListUncommitted:
    """201: which transactions does the sink hold after Phase1 and before Phase2?"""

    rtag: int = attrs.field(validator=check_u64)


@attrs.frozen
class ReplyUncommitted:
    """202: the answer to the ListUncommitted with the same ``rtag``."""

    rtag: int = attrs.field(validator=check_u64)
    txn_ids: tuple[str, ...] = attrs.field(
        default=(), converter=to_tuple, validator=check_tuple_of_text
    )


@attrs.frozen
class Phase1:
    """203: can the sink make these byte ranges durable? (it votes with a Reply)"""

    txn_id: str = attrs.field(validator=check_short_text)
    where: tuple[Where, ...] = attrs.field(
        default=(), converter=to_tuple, validator=check_tuple_of(Where)
    )


@attrs.frozen
class TwoPCReply:
    """204: the sink's vote on Phase1 ``txn_id``: commit (True) or abort (False)."""

    txn_id: str = attrs.field(validator=check_short_text)
    commit: bool = attrs.field(validator=check_bool)


@attrs.frozen
class Phase2:
    """205: the decision on ``txn_id``: commit (True) or abort (False). No reply."""

    txn_id: str = attrs.field(validator=check_short_text)
    commit: bool = attrs.field(validator=check_bool)


@attrs.frozen
class WorkersLeft:
    """206: workers that left the cluster, under request tag ``rtag``."""

    rtag: int = attrs.field(validator=check_u64)
    workers: tuple[str, ...] = attrs.field(
        default=(), converter=to_tuple, validator=check_tuple_of_text
    )


TwoPCMessage = ListUncommitted | ReplyUncommitted | Phase1 | TwoPCReply | Phase2 | WorkersLeft

_TAG_OF: dict[type, TwoPCTag] = {
    ListUncommitted: TwoPCTag.LIST_UNCOMMITTED,
    ReplyUncommitted: TwoPCTag.REPLY_UNCOMMITTED,
    Phase1: TwoPCTag.PHASE1,
    TwoPCReply: TwoPCTag.REPLY,
    Phase2: TwoPCTag.PHASE2,
    WorkersLeft: TwoPCTag.WORKERS_LEFT,
}
TWOPC_TYPES: Final = (ListUncommitted, ReplyUncommitted, Phase1, TwoPCReply, Phase2, WorkersLeft)


def _names(names: tuple[str, ...]) -> bytes:
    return U32.pack(len(names)) + b"".join(short_text(n) for n in names)


def encode_twopc(msg: TwoPCMessage) -> bytes:
    """The MESSAGE payload for ``msg``: inner tag then body.

    Raises:
        TypeError: ``msg`` is not a 2PC message.
    """
    tag = _TAG_OF.get(type(msg))
    if tag is None:
        raise TypeError(f"{msg!r} is not a 2PC message")
    match msg:
        case ListUncommitted(rtag):
            body = U64.pack(rtag)
        case ReplyUncommitted(rtag, names) | WorkersLeft(rtag, names):
            body = U64.pack(rtag) + _names(names)
        case Phase1(txn_id, where):
            body = (
                short_text(txn_id)
                + U32.pack(len(where))
                + b"".join(_WHERE.pack(w.stream_id, w.start, w.end) for w in where)
            )
        case TwoPCReply(txn_id, commit) | Phase2(txn_id, commit):  # one layout for both
            body = short_text(txn_id) + (b"\x01" if commit else b"\x00")
    return bytes([tag]) + body


def twopc_message(msg: TwoPCMessage) -> Message:
    """The MESSAGE frame that carries ``msg``: stream 0, message id 0, event time 0, no key."""
    return Message(TWOPC_STREAM_ID, 0, encode_twopc(msg))


def _read_names(r: FieldReader, field: str) -> tuple[str, ...]:
    return tuple(r.short_text(field) for _ in range(r.count(field, 2)))


def _read_vote(r: FieldReader) -> tuple[str, bool]:
    txn_id = r.short_text("transaction id")
    flag = r.u8("commit")
    if flag > 1:
        raise FrameFormatError(f"{r.what}: commit byte must be 0 or 1, got {flag}")
    return txn_id, flag == 1


def decode_twopc(payload: bytes) -> TwoPCMessage:
    """The 2PC message in a stream-0 MESSAGE payload.

    Raises:
        UnknownFrameTypeError: the inner tag is not a 2PC message type.
        FrameFormatError: the payload is empty, cut short, too long or holds bad UTF-8.
    """
    if not payload:
        raise FrameFormatError("2PC message on stream 0 is empty (no inner tag)")
    try:
        tag = TwoPCTag(payload[0])
    except ValueError:
        raise UnknownFrameTypeError(f"unknown 2PC message type {payload[0]}") from None
    r = FieldReader(payload[1:], f"2PC {tag.name}")
    msg: TwoPCMessage
    if tag is TwoPCTag.LIST_UNCOMMITTED:
        msg = ListUncommitted(r.u64("rtag"))
    elif tag is TwoPCTag.REPLY_UNCOMMITTED:
        rtag = r.u64("rtag")
        msg = ReplyUncommitted(rtag, _read_names(r, "transaction ids"))
    elif tag is TwoPCTag.WORKERS_LEFT:
        rtag = r.u64("rtag")
        msg = WorkersLeft(rtag, _read_names(r, "worker names"))
    elif tag is TwoPCTag.PHASE1:
        txn_id = r.short_text("transaction id")
        n = r.count("ranges", _WHERE.size)
        where = tuple(Where(*_WHERE.unpack(r.take(_WHERE.size, "range"))) for _ in range(n))
        msg = Phase1(txn_id, where)
    elif tag is TwoPCTag.REPLY:
        msg = TwoPCReply(*_read_vote(r))
    else:
        msg = Phase2(*_read_vote(r))
    r.end()
    return msg


class TwoPCSession:
    """The order of 2PC messages on one connection, checked in both directions.

    ``check`` raises ``ValueError`` with a one-line reason (the connection turns it into a
    local or a remote error); ``apply`` records a message that passed. Kept apart so that
    a refused message changes nothing.
    """

    def __init__(self) -> None:
        self.asked_rtags: set[int] = set()  # ListUncommitted sent, not yet answered
        self.awaiting_vote: set[str] = set()  # Phase1 sent, no Reply yet
        self.open_round: str | None = None  # Phase1 sent, no Phase2 yet

    def check(self, msg: TwoPCMessage) -> None:
        match msg:
            case ReplyUncommitted(rtag) if rtag not in self.asked_rtags:
                raise ValueError(f"ReplyUncommitted with rtag {rtag} answers no ListUncommitted")
            case TwoPCReply(txn_id) if txn_id not in self.awaiting_vote:
                raise ValueError(f"2PC Reply for transaction {txn_id!r} answers no Phase1")
            case Phase1(txn_id) if self.open_round is not None:
                raise ValueError(
                    f"Phase1 {txn_id!r} while the round of {self.open_round!r} is open"
                )

    def apply(self, msg: TwoPCMessage) -> None:
        match msg:
            case ListUncommitted(rtag):
                self.asked_rtags.add(rtag)
            case ReplyUncommitted(rtag):
                self.asked_rtags.discard(rtag)
            case Phase1(txn_id):
                self.open_round = txn_id
                self.awaiting_vote.add(txn_id)
            case TwoPCReply(txn_id):
                self.awaiting_vote.discard(txn_id)
            case Phase2(txn_id):
                if self.open_round == txn_id:
                    self.open_round = None
                self.awaiting_vote.discard(txn_id)

    def check_data(self, stream_id: int) -> None:
        """Data MESSAGEs are forbidden while a round is open (the protocol's sink rule)."""
        if self.open_round is not None:
            raise ValueError(
                f"data MESSAGE on stream {stream_id} inside the 2PC round of "
                f"{self.open_round!r} (between its Phase1 and Phase2)"
            )
