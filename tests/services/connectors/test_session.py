"""Two connections, connector role and worker role, joined in memory with no network,
running whole sessions: a source feeding lines, and a worker driving a 2PC sink."""

from __future__ import annotations

from ambrosia_services.connectors import (
    SINK_VERSION,
    SOURCE_VERSION,
    Ack,
    ConnectionClosed,
    ConnectionState,
    ConnectorConnection,
    EosMessage,
    Hello,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    StreamState,
    TwoPCReply,
    Where,
)

from .helpers import Pair, feed_in_pieces, one_byte_at_a_time

LINES = [b"one\n", b"two\n", b"three\n"]


def _offsets(lines: list[bytes]) -> list[int]:
    out, pos = [], 0
    for line in lines:
        out.append(pos)
        pos += len(line)
    return out


def _source_session(p: Pair) -> None:
    """A file feed as Wallaroo's own source library runs it: message ids are the lines'
    start offsets, the key is the path, and the worker acks the end offset."""
    hello = Hello(SOURCE_VERSION, b"cookie", "feed", "feed-1")
    assert p.c_send(hello) == [hello]
    assert p.w.state is ConnectionState.HANDSHAKE
    assert p.w_send(Ok(10)) == [Ok(10)]
    assert p.c.state is p.w.state is ConnectionState.STREAMING

    assert p.c_send(Notify(42, "/data/in.txt", 0)) == [Notify(42, "/data/in.txt", 0)]
    assert p.w_send(NotifyAck(True, 42, 0)) == [NotifyAck(True, 42, 0)]
    sent = [
        Message(42, offset, line, 0, b"/data/in.txt")
        for offset, line in zip(_offsets(LINES), LINES, strict=True)
    ]
    received = []
    for m in sent:
        received += p.c_send(m)
    assert received == sent
    end = sum(len(x) for x in LINES)
    assert p.w_send(Ack(3, ((42, end),))) == [Ack(3, ((42, end),))]
    assert p.c_send(EosMessage(42)) == [EosMessage(42)]
    assert p.w.stream_state(42) is p.c.stream_state(42) is StreamState.CLOSED
    assert p.c.credits == p.w.credits == 10 - 1 - 3 + 3 - 1

    # The feed comes back for more: the stream resumes where the worker says.
    assert p.c_send(Notify(42, "/data/in.txt", end)) == [Notify(42, "/data/in.txt", end)]
    assert p.w_send(NotifyAck(True, 42, end)) == [NotifyAck(True, 42, end)]
    assert p.c_send(Message(42, end, b"four\n")) == [Message(42, end, b"four\n")]
    p.c.send(ConnectionClosed())
    p.w.receive_data(b"")
    assert list(p.w.events()) == [ConnectionClosed()]
    assert p.w.state is ConnectionState.DISCONNECTED


def test_a_whole_source_session() -> None:
    _source_session(Pair(cookie=b"cookie"))


def _sink_session(p: Pair) -> None:
    """The coordinator (connector role) writes to a 2PC sink (worker role): ids are byte
    offsets of the output, and a 2PC round commits them."""
    hello = Hello(SINK_VERSION, b"k", "coordinator", "sink-1")
    assert p.c_send(hello) == [hello]
    assert p.w_send(Ok(500)) == [Ok(500)]
    assert p.c_send(ListUncommitted(1)) == [ListUncommitted(1)]
    assert p.w_send(ReplyUncommitted(1, ())) == [ReplyUncommitted(1, ())]
    assert p.c_send(Notify(1, "sink", 0)) == [Notify(1, "sink", 0)]
    assert p.w_send(NotifyAck(True, 1, 0)) == [NotifyAck(True, 1, 0)]
    for offset, line in zip(_offsets(LINES), LINES, strict=True):
        assert p.c_send(Message(1, offset, line)) == [Message(1, offset, line)]
    end = sum(len(x) for x in LINES)
    phase1 = Phase1("txn-1", (Where(1, 0, end),))
    assert p.c_send(phase1) == [phase1]
    assert p.w_send(TwoPCReply("txn-1", True)) == [TwoPCReply("txn-1", True)]
    assert p.c_send(Phase2("txn-1", True)) == [Phase2("txn-1", True)]
    assert p.c_send(EosMessage(1)) == [EosMessage(1)]
    assert p.w_send(Ack(1, ((1, end),))) == [Ack(1, ((1, end),))]
    assert p.c.state is p.w.state is ConnectionState.STREAMING


def test_a_whole_sink_session_with_a_2pc_round() -> None:
    _sink_session(Pair(twopc=True, cookie=b"k"))


def test_source_session_fed_one_byte_at_a_time() -> None:
    _source_session(Pair(cookie=b"cookie", feed=one_byte_at_a_time))


def test_sink_session_fed_one_byte_at_a_time() -> None:
    _sink_session(Pair(twopc=True, cookie=b"k", feed=one_byte_at_a_time))


def _odd_pieces(conn: ConnectorConnection, data: bytes) -> list[object]:
    return feed_in_pieces(conn, data, range(3, len(data), 7))


def test_sessions_fed_in_odd_pieces() -> None:
    _source_session(Pair(cookie=b"cookie", feed=_odd_pieces))
    _sink_session(Pair(twopc=True, cookie=b"k", feed=_odd_pieces))
