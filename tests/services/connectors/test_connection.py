"""The connection's rules, one by one, with the exact error each broken rule raises.

Every error breaks the connection: it is then in ERROR, refuses to go on, throws away what
arrives, and offers exactly one ERROR frame (with the error's reason) to send.
"""

from __future__ import annotations

import pytest
from ambrosia_services.connectors import (
    SINK_VERSION,
    SOURCE_VERSION,
    Ack,
    ConnectionBrokenError,
    ConnectionClosed,
    ConnectionState,
    ConnectorConnection,
    ConnectorProtocolError,
    EosMessage,
    ErrorFrame,
    FrameFormatError,
    FrameReader,
    FrameTooLargeError,
    HandshakeError,
    Hello,
    IllegalSendError,
    ListUncommitted,
    Message,
    MessageIdRegressionError,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Restart,
    Role,
    StreamNotNotifiedError,
    StreamState,
    TwoPCOrderError,
    TwoPCReply,
    UnexpectedFrameError,
    UnknownFrameTypeError,
    encode_frame,
    twopc_message,
)

from ambrosia_core.wire import NEED_DATA

from .helpers import Pair, h


def _assert_broken(conn: ConnectorConnection, reason: str) -> None:
    """Broken by an error with ``reason``: ERROR state, one ERROR frame, nothing goes on."""
    assert conn.state is ConnectionState.ERROR
    assert conn.error is not None and conn.error.reason == reason
    assert conn.take_error_frame() == encode_frame(ErrorFrame(reason))
    assert conn.take_error_frame() == b""
    with pytest.raises(ConnectionBrokenError) as e:
        conn.next_event()
    assert str(e.value) == f"the connection is broken ({reason})"
    with pytest.raises(ConnectionBrokenError):
        conn.send(ErrorFrame("again"))
    conn.receive_data(b"\x00\x00\x00\x01\x02")
    assert conn.discarded == 5
    assert list(conn.events()) == []


def _worker_receiving(
    *frames: object, twopc: bool = False, cookie: bytes = b""
) -> ConnectorConnection:
    w = ConnectorConnection(Role.WORKER, twopc=twopc, cookie=cookie)
    w.receive_data(b"".join(encode_frame(f) for f in frames))  # type: ignore[arg-type]
    return w


# ---------------------------------------------------------------- handshake
def test_wrong_cookie_is_refused_with_an_error_frame() -> None:
    w = _worker_receiving(Hello(SOURCE_VERSION, b"guess", "p", "i"), cookie=b"secret")
    with pytest.raises(HandshakeError) as e:
        w.next_event()
    assert str(e.value) == "HELLO carries a wrong cookie (offset 0, message type 0)"
    _assert_broken(w, "HELLO carries a wrong cookie")


def test_a_cookie_where_none_is_configured_fails_loudly() -> None:
    w = _worker_receiving(Hello(SOURCE_VERSION, b"x", "p", "i"))
    with pytest.raises(HandshakeError) as e:
        w.next_event()
    assert e.value.reason == "HELLO carries a cookie although none is configured"
    _assert_broken(w, e.value.reason)


def test_missing_cookie_is_refused() -> None:
    w = _worker_receiving(Hello(SOURCE_VERSION, b"", "p", "i"), cookie=b"secret")
    with pytest.raises(HandshakeError, match=r"^HELLO carries a wrong cookie"):
        w.next_event()


def test_right_cookie_is_accepted() -> None:
    hello = Hello(SOURCE_VERSION, b"secret", "p", "i")
    w = _worker_receiving(hello, cookie=b"secret")
    assert w.next_event() == hello
    assert w.state is ConnectionState.HANDSHAKE
    assert w.hello == hello


def test_wrong_version_is_refused() -> None:
    # A source's version sent to a sink link: real 2PC sinks accept only "v0.0.1".
    w = _worker_receiving(Hello(SOURCE_VERSION, b"", "p", "i"), twopc=True)
    with pytest.raises(HandshakeError) as e:
        w.next_event()
    assert e.value.reason == "unexpected protocol version '0.0.1' in HELLO (expected 'v0.0.1')"
    _assert_broken(w, e.value.reason)


def test_both_versions_when_configured() -> None:
    for version in (SOURCE_VERSION, SINK_VERSION):
        w = ConnectorConnection(Role.WORKER, versions=[SOURCE_VERSION, SINK_VERSION])
        w.receive_data(encode_frame(Hello(version, b"", "p", "i")))
        assert w.next_event() == Hello(version, b"", "p", "i")


def test_sending_a_hello_this_side_would_refuse_is_a_local_error() -> None:
    c = ConnectorConnection(Role.CONNECTOR, cookie=b"secret")
    with pytest.raises(IllegalSendError) as e:
        c.send(Hello("v9", b"secret", "p", "i"))
    assert str(e.value) == (
        "cannot send: unexpected protocol version 'v9' in HELLO (expected '0.0.1')"
    )
    _assert_broken(c, str(e.value))


# ---------------------------------------------------------------- order of frames
def test_notify_before_ok_is_a_remote_error() -> None:
    w = _worker_receiving(Hello(SOURCE_VERSION, b"", "p", "i"), Notify(1, "s"))
    assert w.next_event() == Hello(SOURCE_VERSION, b"", "p", "i")
    with pytest.raises(UnexpectedFrameError) as e:
        w.next_event()
    assert str(e.value) == (
        "NOTIFY from the connector is not allowed in state HANDSHAKE "
        "(HELLO sent, waiting for OK) (offset 20, message type 3)"
    )
    _assert_broken(w, e.value.reason)


def test_a_frame_of_the_other_role_is_a_remote_error() -> None:
    w = _worker_receiving(Ok(3))
    with pytest.raises(UnexpectedFrameError) as e:
        w.next_event()
    assert e.value.reason == (
        "OK from the connector is not allowed in state CONNECTED (connected, no HELLO yet)"
    )


def test_a_frame_the_table_forbids_is_a_local_error_when_sent() -> None:
    p = Pair()
    with pytest.raises(IllegalSendError) as e:
        p.w.send(NotifyAck(True, 1, 0))
    assert e.value.reason == (
        "cannot send: NOTIFY_ACK from the worker is not allowed in state CONNECTED "
        "(connected, no HELLO yet)"
    )
    _assert_broken(p.w, e.value.reason)


def test_unknown_frame_type() -> None:
    w = ConnectorConnection(Role.WORKER)
    w.receive_data(h("00 00 00 01 09"))
    with pytest.raises(UnknownFrameTypeError) as e:
        w.next_event()
    assert str(e.value) == "unknown frame type 9 (offset 0, message type 9)"
    _assert_broken(w, "unknown frame type 9")


def test_trailing_bytes_are_a_format_error() -> None:
    w = ConnectorConnection(Role.WORKER)
    w.receive_data(h("00 00 00 0A 08  00 00 00 00 00 00 00 01  FF"))
    with pytest.raises(FrameFormatError) as e:
        w.next_event()
    assert str(e.value) == (
        "EOS_MESSAGE has 1 unexpected bytes after its fields (offset 0, message type 8)"
    )


def test_bad_utf8_is_a_format_error() -> None:
    w = ConnectorConnection(Role.WORKER)
    w.receive_data(h("00 00 00 04 02  00 01 FF"))
    with pytest.raises(FrameFormatError) as e:
        w.next_event()
    assert e.value.reason == "ERROR: reason is not valid UTF-8"


def test_frame_length_zero_is_a_format_error() -> None:
    w = ConnectorConnection(Role.WORKER)
    w.receive_data(h("00 00 00 00"))
    with pytest.raises(FrameFormatError) as e:
        w.next_event()
    assert str(e.value) == "frame length 0 leaves no room for a tag (offset 0)"


# ---------------------------------------------------------------- streams
def test_message_on_a_stream_never_notified() -> None:
    p = Pair()
    p.handshake()
    p.w.receive_data(encode_frame(Message(9, 1, b"x")))
    with pytest.raises(StreamNotNotifiedError) as e:
        p.w.next_event()
    assert str(e.value) == (
        "MESSAGE on stream 9, which was never NOTIFYed (offset 26, message type 5)"
    )
    _assert_broken(p.w, e.value.reason)


def test_sending_on_a_stream_never_notified_is_a_local_error() -> None:
    p = Pair()
    p.handshake()
    with pytest.raises(IllegalSendError) as e:
        p.c.send(EosMessage(9))
    assert e.value.reason == "cannot send: EOS_MESSAGE on stream 9, which was never NOTIFYed"
    _assert_broken(p.c, e.value.reason)


def test_message_before_notify_ack_is_refused() -> None:
    p = Pair()
    p.handshake()
    p.c_send(Notify(1, "s1"))
    with pytest.raises(IllegalSendError) as e:
        p.c.send(Message(1, 0))
    assert e.value.reason == (
        "cannot send: MESSAGE from the connector is not allowed on stream 1 in state "
        "NOTIFY_SENT (NOTIFYed, waiting for NOTIFY_ACK)"
    )


def test_message_id_going_backwards() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.c_send(Message(1, 10, b"a"))
    p.w.receive_data(encode_frame(Message(1, 4, b"b")))
    with pytest.raises(MessageIdRegressionError) as e:
        p.w.next_event()
    assert e.value.reason == "MESSAGE id 4 on stream 1 does not rise above the previous id 10"
    _assert_broken(p.w, e.value.reason)


def test_message_id_repeated_is_refused_locally() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.c_send(Message(1, 10, b"a"))
    with pytest.raises(IllegalSendError) as e:
        p.c.send(Message(1, 10, b"a"))
    assert e.value.reason == (
        "cannot send: MESSAGE id 10 on stream 1 does not rise above the previous id 10"
    )


def test_ids_are_per_stream() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.open_stream(2)
    assert p.c_send(Message(1, 10)) == [Message(1, 10)]
    assert p.c_send(Message(2, 3)) == [Message(2, 3)]
    assert p.w.last_message_id(1) == 10 and p.w.last_message_id(2) == 3


def test_eos_closes_the_stream() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.c_send(Message(1, 10))
    p.c_send(Message(1, 20))
    assert p.c_send(EosMessage(1)) == [EosMessage(1)]
    assert p.w.stream_state(1) is StreamState.CLOSED
    # A closed stream still takes ACKs, but no MESSAGE.
    assert p.w_send(Ack(2, ((1, 10),))) == [Ack(2, ((1, 10),))]
    with pytest.raises(IllegalSendError, match="not allowed on stream 1 in state CLOSED"):
        p.c.send(Message(1, 30))


def test_resume_after_eos() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.c_send(Message(1, 10))
    p.c_send(Message(1, 20))
    p.c_send(EosMessage(1))
    assert p.c_send(Notify(1, "s1", 10)) == [Notify(1, "s1", 10)]
    assert p.w.stream_state(1) is StreamState.NOTIFY_SENT
    p.w_send(NotifyAck(True, 1, 10))
    assert p.c.stream_state(1) is StreamState.OPEN
    assert p.w.last_message_id(1) is None
    # The worker acknowledged up to 10, so the connector resends from 10.
    assert p.c_send(Message(1, 10, b"again")) == [Message(1, 10, b"again")]


def test_refused_notify_closes_the_stream() -> None:
    p = Pair()
    p.handshake()
    p.c_send(Notify(5, "taken"))
    assert p.w_send(NotifyAck(False, 5, 0)) == [NotifyAck(False, 5, 0)]
    assert p.c.stream_state(5) is StreamState.CLOSED
    with pytest.raises(IllegalSendError, match="in state CLOSED"):
        p.c.send(Message(5, 1))


def test_notify_twice_is_refused() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.w.receive_data(encode_frame(Notify(1, "again")))
    with pytest.raises(UnexpectedFrameError) as e:
        p.w.next_event()
    assert e.value.reason == (
        "NOTIFY from the connector is not allowed on stream 1 in state OPEN "
        "(open: MESSAGEs may flow)"
    )


def test_ack_for_a_stream_never_notified_is_refused() -> None:
    p = Pair()
    p.handshake()
    with pytest.raises(IllegalSendError, match="ACK from the worker is not allowed on stream 4"):
        p.w.send(Ack(1, ((4, 0),)))


def test_restart_terminates_every_stream_and_disconnects() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.c_send(Notify(2, "s2"))
    assert p.w_send(Restart("127.0.0.1:7001")) == [Restart("127.0.0.1:7001"), ConnectionClosed()]
    for conn in (p.c, p.w):
        assert conn.state is ConnectionState.DISCONNECTED
        assert dict(conn.streams) == {1: StreamState.TERMINATED, 2: StreamState.TERMINATED}
        assert conn.take_error_frame() == b""
    assert p.c.next_event() == ConnectionClosed()
    p.c.receive_data(b"late bytes")
    assert p.c.discarded == 10
    with pytest.raises(IllegalSendError) as e:
        p.c.send(Message(1, 99))
    assert e.value.reason == "cannot send: the connection is closed"


# ---------------------------------------------------------------- ERROR and close
def test_the_peers_error_frame_ends_the_connection_without_an_answer() -> None:
    p = Pair()
    p.handshake()
    assert p.w_send(ErrorFrame("shutting down")) == [ErrorFrame("shutting down")]
    assert p.c.state is ConnectionState.ERROR
    assert p.c.peer_error == "shutting down"
    assert p.c.error is None
    assert p.c.take_error_frame() == b""  # nobody answers an ERROR with an ERROR
    with pytest.raises(ConnectionBrokenError) as e:
        p.c.next_event()
    assert str(e.value) == "the connection is broken (the peer sent ERROR: shutting down)"
    assert p.w.state is ConnectionState.ERROR
    with pytest.raises(ConnectionBrokenError, match=r"\(this side sent ERROR\)"):
        p.w.send(Ack(1))


def test_clean_close_at_a_frame_boundary() -> None:
    p = Pair()
    p.handshake()
    p.w.receive_data(b"")
    assert p.w.next_event() == ConnectionClosed()
    assert p.w.state is ConnectionState.DISCONNECTED
    assert p.w.next_event() == ConnectionClosed()


def test_a_connection_that_stops_mid_frame() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(1)
    p.c_send(Message(1, 1, b"acknowledged"))
    data = encode_frame(Message(1, 2, b"cut off"))
    p.w.receive_data(data[:9])
    assert p.w.next_event() is NEED_DATA
    p.w.receive_data(b"")
    with pytest.raises(FrameFormatError) as e:
        p.w.next_event()
    assert str(e.value) == (
        "the peer closed the connection in the middle of a frame (9 bytes of it received) "
        "(offset 94)"  # HELLO 26 + NOTIFY 25 + MESSAGE 43 bytes before it
    )
    assert p.w.last_message_id(1) == 1  # what came before is intact
    _assert_broken(p.w, e.value.reason)


def test_bytes_after_end_of_input_are_a_local_error() -> None:
    w = ConnectorConnection(Role.WORKER)
    w.receive_data(b"")
    w.receive_data(b"")  # the end announced twice is still the end
    with pytest.raises(ConnectionBrokenError) as e:
        w.receive_data(b"x")
    assert str(e.value) == "bytes received after the peer closed the connection"
    assert w.next_event() == ConnectionClosed()


def test_closing_locally() -> None:
    p = Pair()
    p.handshake()
    assert p.c.send(ConnectionClosed()) == b""
    assert p.c.state is ConnectionState.DISCONNECTED


# ---------------------------------------------------------------- frame size
def test_oversized_frame_is_refused_as_soon_as_its_length_arrives() -> None:
    w = ConnectorConnection(Role.WORKER, max_frame_size=64)
    hello = encode_frame(Hello(SOURCE_VERSION, b"", "p", "i"))
    w.receive_data(hello + (65).to_bytes(4, "big"))  # no body byte yet
    assert w.next_event() == Hello(SOURCE_VERSION, b"", "p", "i")
    with pytest.raises(FrameTooLargeError) as e:
        w.next_event()
    assert str(e.value) == (
        f"frame of 65 bytes is over the 64-byte limit (offset {len(hello)})"
    )
    _assert_broken(w, "frame of 65 bytes is over the 64-byte limit")


def test_an_oversized_body_is_never_buffered() -> None:
    reader = FrameReader(max_frame_size=64)
    reader.receive_data(h("00 01 00 00  06") + bytes(1000))
    assert reader.buffered == 4  # only the length was kept
    reader.receive_data(bytes(100_000))
    assert reader.buffered == 4
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()
    with pytest.raises(FrameTooLargeError):
        reader.receive_data(b"x")


def test_a_frame_at_the_limit_is_accepted() -> None:
    w = ConnectorConnection(Role.WORKER, max_frame_size=14)
    data = encode_frame(Hello(SOURCE_VERSION, b"", "", ""))
    assert len(data) == 4 + 14
    w.receive_data(data)
    assert w.next_event() == Hello(SOURCE_VERSION, b"", "", "")


def test_default_frame_limit_is_four_mib() -> None:
    assert ConnectorConnection(Role.WORKER)._reader.max_frame_size == 4 * 1024 * 1024


# ---------------------------------------------------------------- credits
def test_credits_follow_ok_acks_and_frames_sent() -> None:
    p = Pair()
    p.handshake(credits=5)
    p.open_stream(1)  # NOTIFY costs one
    p.c_send(Message(1, 1))
    p.c_send(Message(1, 2))
    assert p.c.credits == p.w.credits == 2
    p.w_send(Ack(3, ((1, 2),)))
    assert p.c.credits == p.w.credits == 5


# ---------------------------------------------------------------- 2PC
def _sink_pair() -> Pair:
    p = Pair(twopc=True, cookie=b"k")
    p.handshake(credits=500)
    p.open_stream(1)
    return p


def test_twopc_messages_arrive_as_their_own_events() -> None:
    p = _sink_pair()
    assert p.c_send(ListUncommitted(1)) == [ListUncommitted(1)]
    assert p.w_send(ReplyUncommitted(1, ("t0",))) == [ReplyUncommitted(1, ("t0",))]
    assert p.wire[-1] == ("w", encode_frame(twopc_message(ReplyUncommitted(1, ("t0",)))))


def test_data_inside_a_round_is_refused() -> None:
    p = _sink_pair()
    p.c_send(Message(1, 0, b"abc"))
    p.c_send(Phase1("t1", ()))
    p.w.receive_data(encode_frame(Message(1, 3, b"def")))
    with pytest.raises(TwoPCOrderError) as e:
        p.w.next_event()
    assert e.value.reason == (
        "data MESSAGE on stream 1 inside the 2PC round of 't1' (between its Phase1 and Phase2)"
    )
    _assert_broken(p.w, e.value.reason)


def test_a_vote_nobody_asked_for_is_refused() -> None:
    p = _sink_pair()
    p.c.receive_data(encode_frame(twopc_message(TwoPCReply("t9", True))))
    with pytest.raises(TwoPCOrderError) as e:
        p.c.next_event()
    assert str(e.value).startswith("2PC Reply for transaction 't9' answers no Phase1 (offset ")


def test_a_listing_nobody_asked_for_is_refused() -> None:
    p = _sink_pair()
    with pytest.raises(IllegalSendError) as e:
        p.w.send(ReplyUncommitted(4))
    assert e.value.reason == "cannot send: ReplyUncommitted with rtag 4 answers no ListUncommitted"


def test_two_rounds_at_once_are_refused() -> None:
    p = _sink_pair()
    p.c_send(Phase1("t1"))
    with pytest.raises(IllegalSendError, match="Phase1 't2' while the round of 't1' is open"):
        p.c.send(Phase1("t2"))


def test_the_sink_cannot_send_phase1() -> None:
    p = _sink_pair()
    with pytest.raises(IllegalSendError) as e:
        p.w.send(Phase1("t1"))
    assert e.value.reason == (
        "cannot send: 2PC Phase1 from the worker is not allowed in state STREAMING (streaming)"
    )


def test_phase2_settles_a_transaction_listed_after_a_reconnect() -> None:
    # No Phase1 on this connection: the sink listed t1 as left after Phase1.
    p = _sink_pair()
    p.c_send(ListUncommitted(1))
    p.w_send(ReplyUncommitted(1, ("t1",)))
    assert p.c_send(Phase2("t1", True)) == [Phase2("t1", True)]
    assert p.c_send(Message(1, 0, b"more")) == [Message(1, 0, b"more")]


def test_stream_zero_of_a_sink_link_is_reserved() -> None:
    p = _sink_pair()
    with pytest.raises(IllegalSendError) as e:
        p.c.send(Notify(0, "twopc"))
    assert e.value.reason == (
        "cannot send: NOTIFY of stream 0, which a sink link keeps for 2PC messages"
    )
    q = _sink_pair()
    with pytest.raises(IllegalSendError, match="stream 0 of a sink link carries 2PC messages only"):
        q.c.send(Message(0, 0, b"raw"))


def test_twopc_needs_a_sink_link() -> None:
    p = Pair()
    p.handshake()
    with pytest.raises(IllegalSendError) as e:
        p.c.send(ListUncommitted(1))
    assert e.value.reason == "cannot send: 2PC ListUncommitted needs a 2PC sink link (twopc=True)"


def test_on_a_source_link_stream_zero_is_an_ordinary_stream() -> None:
    p = Pair()
    p.handshake()
    p.open_stream(0)
    payload = twopc_message(ListUncommitted(1)).payload
    assert p.c_send(Message(0, 5, payload)) == [Message(0, 5, payload)]


def test_bad_twopc_payload_is_a_format_error() -> None:
    p = _sink_pair()
    p.c.receive_data(encode_frame(Message(0, 0, h("C8 00"))))
    with pytest.raises(UnknownFrameTypeError) as e:
        p.c.next_event()
    assert e.value.reason == "unknown 2PC message type 200"
    q = _sink_pair()
    q.w.receive_data(encode_frame(Message(0, 0, b"")))
    with pytest.raises(FrameFormatError) as e2:
        q.w.next_event()
    assert e2.value.reason == "2PC message on stream 0 is empty (no inner tag)"


def test_every_error_is_a_connector_protocol_error() -> None:
    for cls in (
        HandshakeError,
        FrameTooLargeError,
        StreamNotNotifiedError,
        MessageIdRegressionError,
        TwoPCOrderError,
        IllegalSendError,
        ConnectionBrokenError,
    ):
        assert issubclass(cls, ConnectorProtocolError)
