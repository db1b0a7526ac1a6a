"""The 2PC conversation with a sink, without I/O: a sink's side of the same connection
library answers it, and the state's record of the sink is built by hand, so every step
(what is written, what is reported, what waits for the state) is checked frame by frame."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ambrosia_services.connectors._state import Role
from ambrosia_services.connectors.connection import ConnectorConnection
from ambrosia_services.connectors.coordinator.core import Pending, SinkRecord
from ambrosia_services.connectors.coordinator.sink_session import (
    CHUNK,
    Decided,
    Linked,
    Read,
    ReportUncommitted,
    ReportVote,
    SinkLinkError,
    SinkPhase,
    SinkSession,
    Write,
)
from ambrosia_services.connectors.errors import ConnectorProtocolError
from ambrosia_services.connectors.frame_codec import encode_frame
from ambrosia_services.connectors.frames import (
    Ack,
    ErrorFrame,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
)
from ambrosia_services.connectors.twopc import (
    ListUncommitted,
    Phase1,
    Phase2,
    ReplyUncommitted,
    TwoPCReply,
    Where,
    twopc_message,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.wire import NEED_DATA

COOKIE = b"c00kie"
TWOPC = (ListUncommitted, ReplyUncommitted, Phase1, TwoPCReply, Phase2)
RTAG = 77


class Sink:
    """The sink's end of the connection: decodes what the session writes."""

    def __init__(self) -> None:
        self.conn = ConnectorConnection(Role.WORKER, cookie=COOKIE, twopc=True)

    def take(self, actions: list[Any]) -> list[Any]:
        """The frames in the session's ``Write`` actions, in order."""
        for a in actions:
            if isinstance(a, Write):
                self.conn.receive_data(a.data)
        frames = []
        while (event := self.conn.next_event()) is not NEED_DATA:
            frames.append(event)
        return frames

    def say(self, *events: Any) -> bytes:
        return b"".join(self.conn.send(e) for e in events)


def raw(*events: Any) -> bytes:
    """Frames as bytes, whatever the sink's state would allow (a misbehaving sink)."""
    return b"".join(encode_frame(twopc_message(e) if isinstance(e, TWOPC) else e)
                    for e in events)


def _session() -> tuple[SinkSession, Sink]:
    return SinkSession("out", "inst", COOKIE, RTAG, max_frame_size=1 << 20), Sink()


def _record(**fields: Any) -> SinkRecord:
    return SinkRecord(**fields)


def _linked(committed: int = 0, sink_offset: int | None = None
            ) -> tuple[SinkSession, Sink, SinkRecord]:
    """A session through HELLO, the listing (nothing uncommitted) and NOTIFY."""
    session, sink = _session()
    assert sink.take([session.start()]) == [Hello("v0.0.1", COOKIE, "ambrosia-py", "inst")]
    session.receive_data(sink.say(Ok(100)))
    assert sink.take(session.step(None)) == [ListUncommitted(RTAG)]
    session.receive_data(sink.say(ReplyUncommitted(RTAG, ())))
    rec = _record(committed=committed, settled_rtag=RTAG)
    actions = session.step(rec)
    assert actions[0] == ReportUncommitted(RTAG, ())
    assert sink.take(actions) == [Notify(1, "out", committed)]
    session.receive_data(sink.say(NotifyAck(True, 1, committed if sink_offset is None
                                            else sink_offset)))
    assert session.step(rec) == [Linked(committed, committed if sink_offset is None
                                        else sink_offset)]
    return session, sink, rec


def test_a_first_connection_lists_waits_for_the_state_then_notifies() -> None:
    session, sink = _session()
    sink.take([session.start()])
    assert session.step(None) == [] and session.phase is SinkPhase.GREETING  # no OK yet
    session.receive_data(sink.say(Ok(100)))
    assert sink.take(session.step(None)) == [ListUncommitted(RTAG)]
    session.receive_data(sink.say(ReplyUncommitted(RTAG, ("t-3", "t-4"))))
    assert session.step(None) == [ReportUncommitted(RTAG, ("t-3", "t-4"))]
    # The state has not settled this listing (another connection's rtag): nothing goes.
    assert session.step(_record(settled_rtag=RTAG + 1)) == []
    settled = _record(committed=40, settled_rtag=RTAG,
                      settlement=[("t-3", True), ("t-4", False)])
    assert sink.take(session.step(settled)) == [Phase2("t-3", True), Phase2("t-4", False),
                                                Notify(1, "out", 40)]
    session.receive_data(sink.say(NotifyAck(True, 1, 40)))
    assert session.step(settled) == [Linked(40, 40)]
    assert session.phase is SinkPhase.IDLE


def test_a_transaction_is_read_sent_voted_and_decided_in_turn() -> None:
    session, sink, rec = _linked(committed=5)
    data = b"x" * (CHUNK + 10)
    rec.pending = Pending([data])
    rec.txn_id, rec.txn_end = "inst-out-1", 5 + len(data)
    (read,) = session.step(rec)
    assert read == Read("inst-out-1", (data,))
    assert session.step(rec) == []  # waits for the bytes
    assert sink.take(session.materialized(data)) == [
        Message(1, 5, data[:CHUNK]), Message(1, 5 + CHUNK, data[CHUNK:]),
        Phase1("inst-out-1", (Where(1, 5, 5 + len(data)),))]
    session.receive_data(sink.say(Ack(10, ())))  # credits are ignored anywhere
    assert session.step(rec) == []
    session.receive_data(sink.say(TwoPCReply("inst-out-1", True)))
    assert session.step(rec) == [ReportVote("inst-out-1", True)]
    assert session.step(rec) == []  # the state has not decided
    rec.decided["inst-out-1"] = True
    rec.txn_id, rec.committed = "", rec.txn_end
    actions = session.step(rec)
    assert actions[1:] == [Decided("inst-out-1", True)]
    assert sink.take(actions) == [Phase2("inst-out-1", True)]
    assert session.phase is SinkPhase.IDLE


def test_an_abort_ends_the_conversation() -> None:
    session, sink, rec = _linked()
    rec.pending, rec.txn_id, rec.txn_end = Pending([b"abc"]), "t", 3
    session.step(rec)
    sink.take(session.materialized(b"abc"))
    session.receive_data(sink.say(TwoPCReply("t", False)))
    assert session.step(rec) == [ReportVote("t", False)]
    rec.decided["t"] = False
    rec.txn_id = ""
    actions = session.step(rec)
    assert sink.take(actions) == [Phase2("t", False)]
    assert actions[-1] == Decided("t", False) and session.phase is SinkPhase.OVER
    assert session.step(rec) == []


@pytest.mark.parametrize(("trouble", "line"), [
    (lambda s: s.say(ErrorFrame("disk full")), "the sink sent ERROR: disk full"),
    (lambda s: b"", "the sink closed the connection"),
])
def test_anything_but_credits_while_waiting_on_the_state_ends_the_connection(
        trouble: Any, line: str) -> None:
    session, sink, rec = _linked()
    session.receive_data(trouble(sink))
    with pytest.raises(SinkLinkError) as err:
        session.step(rec)
    assert str(err.value) == line


def test_a_frame_out_of_turn_breaks_the_protocol_and_leaves_an_error_frame() -> None:
    session, sink, rec = _linked()
    session.receive_data(raw(TwoPCReply("t", True)))  # a vote with no Phase1
    with pytest.raises(ConnectorProtocolError, match="answers no Phase1"):
        session.step(rec)
    sink.conn.receive_data(session.error_frame())
    assert isinstance(sink.conn.next_event(), ErrorFrame)


def test_what_the_sink_says_that_cannot_be_gone_on_from() -> None:
    session, sink = _session()
    sink.take([session.start()])
    session.receive_data(sink.say(Ok(1)))
    sink.take(session.step(None))
    session.receive_data(sink.say(ReplyUncommitted(RTAG, ())))
    rec = _record(committed=10, settled_rtag=RTAG)
    sink.take(session.step(rec))
    session.receive_data(sink.say(NotifyAck(True, 1, 11)))
    with pytest.raises(SinkLinkError, match="the sink's offset is 11 but 10 bytes are "
                                            "committed: refusing to send a transaction"):
        session.step(rec)
    # Below the committed offset: a restarted sink that keeps its offset in memory.
    assert _linked(committed=10, sink_offset=0)[0].phase is SinkPhase.IDLE

    session, sink, rec = _linked()
    rec.pending, rec.txn_id, rec.txn_end = Pending([b"abc"]), "t", 3
    session.step(rec)
    with pytest.raises(SinkLinkError, match="transaction t: 2 bytes where 3 were emitted"):
        session.materialized(b"ab")
    sink.take(session.materialized(b"abc"))
    session.receive_data(raw(TwoPCReply("other", True)))
    with pytest.raises(ConnectorProtocolError, match="'other' answers no Phase1"):
        session.step(rec)


def test_a_transaction_settled_by_another_connection_is_not_decided_here() -> None:
    session, sink, rec = _linked()
    rec.pending, rec.txn_id, rec.txn_end = Pending([b"abc"]), "t", 3
    session.step(rec)
    sink.take(session.materialized(b"abc"))
    session.receive_data(sink.say(TwoPCReply("t", True)))
    session.step(rec)
    rec.txn_id = ""  # settled by a newer connection's listing, its decision forgotten
    with pytest.raises(SinkLinkError, match="transaction t was settled elsewhere"):
        session.step(rec)


def test_bytes_that_break_the_protocol_leave_an_error_frame_to_send() -> None:
    session, sink = _session()
    session.start()
    session.receive_data(b"\x00\x00\x00\x01\xff")  # a frame of an unknown type
    with pytest.raises(ConnectorProtocolError):
        session.step(None)
    sink.conn.receive_data(session.error_frame())
    assert isinstance(sink.conn.next_event(), ErrorFrame)


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
       ack_cut=st.integers(min_value=0, max_value=40))
def test_any_cut_of_the_sinks_bytes_gives_the_same_conversation(cuts: list[int],
                                                                ack_cut: int) -> None:
    """Frames arrive in pieces: the actions depend on what arrived, not on how."""
    first = raw(Ok(5), Ack(1, ()), ReplyUncommitted(RTAG, ("a",)))
    ack = raw(NotifyAck(True, 1, 3))

    def run(pieces: list[bytes]) -> list[Any]:
        session, sink = _session()
        sink.take([session.start()])
        rec = _record(committed=3, settled_rtag=RTAG)
        out: list[Any] = []
        for piece in filter(None, pieces):  # b"" would say the sink closed
            session.receive_data(piece)
            out += session.step(rec)
        return out

    points = sorted({min(c, len(first)) for c in cuts} | {0, len(first)})
    pieces = [first[a:b] for a, b in itertools.pairwise(points)]
    cut = min(ack_cut, len(ack))
    whole = run([first, ack])
    assert run([*pieces, ack[:cut], ack[cut:]]) == whole
    assert [type(a) for a in whole] == [Write, ReportUncommitted, Write, Linked]
