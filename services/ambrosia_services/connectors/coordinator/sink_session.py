"""One connection's two-phase-commit conversation with a sink, without I/O.

A ``SinkSession`` speaks the coordinator's side of one connection to a 2PC sink, as
Wallaroo's sink side does: HELLO; ListUncommitted, whose answer the state settles; the
Phase2s it decided; NOTIFY of stream 1 at the committed offset the state holds; then, for
each transaction the state cuts, its bytes as MESSAGEs whose ids are byte offsets, Phase1,
the vote, and once the state decided, Phase2.

It is driven from two sides and returns what to do as data:

- ``receive_data(bytes)`` takes what the sink sent (``b""`` when it closed);
- ``step(record)`` advances as far as the sink's frames and the state's record of the sink
  (``SinkRecord``, or None while it has none) allow, and returns actions: ``Write`` bytes
  to the sink, ``Report`` a listing or a vote to the state (as an Impulse), ``Read`` a
  transaction's parts (staged blocks live in segment files) and give the bytes back with
  ``materialized``, ``Linked`` once NOTIFY_ACK arrived, ``Decided`` once a Phase2 went out.

The driver (``sinks.SinkLink``) owns the socket, the clock and the reconnects. Anything the
conversation cannot go on from raises ``SinkLinkError`` (one line); a frame that breaks the
protocol raises the connection's ``ConnectorProtocolError``, after which ``error_frame``
gives the ERROR frame to send before closing.
"""

from __future__ import annotations

import enum
from typing import TypeVar

import attrs

from ambrosia_core.wire import NEED_DATA
from ambrosia_services.staging import Ref

from .._state import Role
from ..connection import SINK_VERSION, ConnectorConnection
from ..frames import Ack, ConnectionClosed, ErrorFrame, Hello, Message, Notify, NotifyAck, Ok
from ..twopc import ListUncommitted, Phase1, Phase2, ReplyUncommitted, TwoPCReply, Where
from .core import SinkRecord

__all__ = [
    "CHUNK",
    "PROGRAM_NAME",
    "SINK_STREAM_ID",
    "Action",
    "Decided",
    "Linked",
    "Read",
    "ReportUncommitted",
    "ReportVote",
    "SinkLinkError",
    "SinkSession",
    "Write",
]

PROGRAM_NAME = "ambrosia-py"
SINK_STREAM_ID = 1
CHUNK = 64 * 1024  # the most output bytes in one MESSAGE

_Frame = TypeVar("_Frame")


class SinkLinkError(Exception):
    """This connection to the sink cannot go on (the reason is one line)."""


# ------------------------------------------------------------------ actions
@attrs.frozen
class Write:
    """Send these bytes to the sink."""

    data: bytes


@attrs.frozen
class ReportUncommitted:
    """The sink listed the transactions it holds after Phase1: the state settles them
    (the ``sink_uncommitted`` Impulse)."""

    rtag: int
    txn_ids: tuple[str, ...]


@attrs.frozen
class ReportVote:
    """The sink voted on a transaction: the state decides it (the ``sink_voted`` Impulse)."""

    txn_id: str
    commit: bool


@attrs.frozen
class Linked:
    """NOTIFY_ACK arrived: output flows from ``offset`` (the committed offset).
    ``sink_offset`` is what the sink said, below ``offset`` when it keeps it in memory
    and restarted."""

    offset: int
    sink_offset: int


@attrs.frozen
class Read:
    """Give the bytes of these parts (bytes and staged blocks, in order) back with
    ``materialized``: the transaction's data."""

    txn_id: str
    parts: tuple[bytes | Ref, ...]


@attrs.frozen
class Decided:
    """Phase2 went out with the state's decision. After an abort the conversation is
    over: its bytes go again from the same offsets, which a connection only allows after
    a new NOTIFY, so the driver connects again."""

    txn_id: str
    commit: bool


Action = Write | ReportUncommitted | ReportVote | Linked | Read | Decided


class SinkPhase(enum.Enum):
    """Where the conversation is: what it waits for."""

    GREETING = "OK to our HELLO"
    LISTING = "the sink's list of uncommitted transactions"
    SETTLING = "the state to settle that list"
    NOTIFYING = "NOTIFY_ACK"
    IDLE = "a transaction cut by the state"
    READING = "the transaction's bytes"
    VOTING = "the sink's vote"
    DECIDING = "the state's decision"
    OVER = "nothing: the conversation ended with an abort"


class SinkSession:
    """The coordinator's side of one connection to the sink ``name``.

    Args:
        name: the sink's name (its key in ``sinks``, the name of its stream 1).
        instance: the instance name, sent in HELLO.
        cookie: the shared cookie.
        rtag: the request tag of this connection's ListUncommitted (random per
            connection, so that a settlement of an earlier connection is never taken for
            this one's).
        max_frame_size: the largest frame accepted from the sink.
    """

    def __init__(self, name: str, instance: str, cookie: bytes, rtag: int, *,
                 max_frame_size: int) -> None:
        self.name = name
        self.instance = instance
        self.rtag = rtag
        self.phase = SinkPhase.GREETING
        self._conn = ConnectorConnection(Role.CONNECTOR, cookie=cookie, twopc=True,
                                         max_frame_size=max_frame_size)
        self._cookie = cookie
        self._txn = ""  # the transaction in flight on this connection
        self._start = self._end = 0

    # ------------------------------------------------------------ inputs
    def start(self) -> Write:
        """The first bytes of the connection: HELLO."""
        return Write(self._conn.send(Hello(SINK_VERSION, self._cookie, PROGRAM_NAME,
                                           self.instance)))

    def receive_data(self, data: bytes) -> None:
        """What the sink sent; ``b""`` when it closed the connection."""
        self._conn.receive_data(data)

    def error_frame(self) -> bytes:
        """After a ``ConnectorProtocolError``: the ERROR frame to send before closing."""
        return self._conn.take_error_frame()

    def step(self, rec: SinkRecord | None) -> list[Action]:
        """Go as far as the frames received and ``rec`` (the state's record of this sink,
        None while it has none or the sink is no longer configured) allow.

        Raises:
            SinkLinkError: the sink closed, sent ERROR or a frame out of turn, or said
                what this coordinator cannot go on from.
            ConnectorProtocolError: the sink's bytes break the protocol.
        """
        out: list[Action] = []
        while True:
            before = self.phase
            self._advance(rec, out)
            if self.phase is before:
                return out

    def materialized(self, data: bytes) -> list[Action]:
        """The bytes of the transaction ``Read`` asked for: its MESSAGEs and Phase1.

        Raises:
            SinkLinkError: they are not as long as the transaction.
        """
        if self.phase is not SinkPhase.READING:
            raise RuntimeError(f"no transaction is being read (waiting for {self.phase.value})")
        if len(data) != self._end - self._start:
            raise SinkLinkError(f"transaction {self._txn}: {len(data)} bytes where "
                                f"{self._end - self._start} were emitted")
        frames = [Message(SINK_STREAM_ID, self._start + off, data[off:off + CHUNK])
                  for off in range(0, len(data), CHUNK)]
        self.phase = SinkPhase.VOTING
        return [self._write(*frames, Phase1(self._txn, (Where(SINK_STREAM_ID, self._start,
                                                               self._end),)))]

    # ------------------------------------------------------------ the conversation
    def _advance(self, rec: SinkRecord | None, out: list[Action]) -> None:
        """One step of the conversation, if what it waits for is there."""
        phase = self.phase
        if phase is SinkPhase.GREETING:
            if self._expect(Ok) is not None:
                out.append(self._write(ListUncommitted(self.rtag)))
                self.phase = SinkPhase.LISTING
        elif phase is SinkPhase.LISTING:
            listed = self._expect(ReplyUncommitted)
            if listed is not None:
                out.append(ReportUncommitted(self.rtag, tuple(listed.txn_ids)))
                self.phase = SinkPhase.SETTLING
        elif phase is SinkPhase.SETTLING:
            self._only_credits()
            if rec is not None and rec.settled_rtag == self.rtag:
                self._start = rec.committed
                out.append(self._write(*(Phase2(t, c) for t, c in rec.settlement),
                                       Notify(SINK_STREAM_ID, self.name, rec.committed)))
                self.phase = SinkPhase.NOTIFYING
        elif phase is SinkPhase.NOTIFYING:
            ack = self._expect(NotifyAck)
            if ack is not None:
                out.append(self._linked(ack))
                self.phase = SinkPhase.IDLE
        elif phase is SinkPhase.IDLE:
            self._only_credits()
            if rec is not None and rec.txn_id:
                self._txn, self._start, self._end = rec.txn_id, rec.committed, rec.txn_end
                out.append(Read(self._txn, tuple(rec.txn_parts())))
                self.phase = SinkPhase.READING
        elif phase is SinkPhase.VOTING:
            reply = self._expect(TwoPCReply)
            if reply is not None:
                if reply.txn_id != self._txn:
                    raise SinkLinkError(f"the sink voted on {reply.txn_id!r}, not {self._txn!r}")
                out.append(ReportVote(self._txn, reply.commit))
                self.phase = SinkPhase.DECIDING
        elif phase is SinkPhase.DECIDING:
            self._only_credits()
            if rec is not None and self._txn not in rec.decided and rec.txn_id == self._txn:
                return  # not decided yet
            decision = None if rec is None else rec.decided.get(self._txn)
            if decision is None:
                raise SinkLinkError(f"transaction {self._txn} was settled elsewhere")
            out.append(self._write(Phase2(self._txn, decision)))
            out.append(Decided(self._txn, decision))
            self.phase = SinkPhase.IDLE if decision else SinkPhase.OVER

    def _linked(self, ack: NotifyAck) -> Linked:
        if not ack.success:
            raise SinkLinkError("the sink refused the output stream (NOTIFY_ACK without "
                                "success)")
        if ack.point_of_reference > self._start:
            # It holds output this coordinator never committed: a Phase1 from our offset
            # would be voted no, and its abort would cut the sink's file back.
            raise SinkLinkError(f"the sink's offset is {ack.point_of_reference} but "
                                f"{self._start} bytes are committed: refusing to send a "
                                "transaction")
        # Below it, as Wallaroo's sink side: the offset a sink answers may come from its
        # memory (aloc_sink says 0 after its restart, its file holding every committed
        # byte); its own checks of the data and of Phase1 decide.
        return Linked(self._start, ack.point_of_reference)

    def _write(self, *events: object) -> Write:
        return Write(b"".join(self._conn.send(e) for e in events))  # type: ignore[arg-type]

    def _expect(self, kind: type[_Frame]) -> _Frame | None:
        """The next frame if it is a ``kind`` (credits skipped), None until one arrives."""
        while True:
            event = self._conn.next_event()
            if event is NEED_DATA:
                return None
            if isinstance(event, kind):
                return event
            if not isinstance(event, Ack):  # credits: ignored, as Wallaroo did
                raise self._unexpected(event)

    def _only_credits(self) -> None:
        """While the conversation waits on the state, the sink may send credits only."""
        while (event := self._conn.next_event()) is not NEED_DATA:
            if not isinstance(event, Ack):
                raise self._unexpected(event)

    def _unexpected(self, event: object) -> SinkLinkError:
        if isinstance(event, ConnectionClosed):
            return SinkLinkError("the sink closed the connection")
        if isinstance(event, ErrorFrame):
            return SinkLinkError(f"the sink sent ERROR: {event.reason}")
        return SinkLinkError(f"unexpected {type(event).__name__} from the sink while "
                             f"waiting for {self.phase.value}")

