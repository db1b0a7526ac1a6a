"""A sink connection's greeting and ending rules without a socket (``sinkend``): HELLO
first and answered with OK, each frame after it handed on, and every way a connection
ends with its reason and the bytes to send last; the newest accepted connection is the
one served."""

from __future__ import annotations

from ambrosia_services.connectors import (
    ConnectorConnection,
    ErrorFrame,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Role,
)
from ambrosia_services.connectors.clients.sinkend import (
    SINK_CREDITS,
    Accepted,
    Ended,
    Frame,
    SinkDoor,
    SinkEnd,
)
from ambrosia_services.connectors.connection import SINK_VERSION

from ambrosia_core.wire import NEED_DATA

COOKIE = b"secret"


def _pair() -> tuple[ConnectorConnection, SinkEnd]:
    return (ConnectorConnection(Role.CONNECTOR, twopc=True, cookie=COOKIE),
            SinkEnd(COOKIE, 1 << 20))


def _hello(cookie: bytes = COOKIE) -> Hello:
    return Hello(SINK_VERSION, cookie, "coordinator", "c1")


def test_hello_is_answered_with_ok_and_frames_after_it_are_handed_on() -> None:
    peer, end = _pair()
    assert end.next_step() is NEED_DATA
    data = peer.send(_hello())
    end.receive_data(data[:3])  # a frame in pieces: nothing yet, a frame begun
    assert end.next_step() is NEED_DATA and end.partial_frame
    end.receive_data(data[3:])
    step = end.next_step()
    assert type(step) is Accepted and end.accepted
    peer.receive_data(step.reply)
    assert peer.next_event() == Ok(SINK_CREDITS)
    end.receive_data(peer.send(Notify(1, "out", 0)))
    assert end.next_step() == Frame(Notify(1, "out", 0))
    assert end.next_step() is NEED_DATA
    peer.receive_data(end.send([NotifyAck(True, 1, 0)]))
    assert peer.next_event() == NotifyAck(True, 1, 0)
    end.receive_data(peer.send(Message(1, 0, b"x\n")))
    assert end.next_step() == Frame(Message(1, 0, b"x\n"))
    end.receive_data(b"")
    assert end.next_step() == Ended("closed by the peer")
    assert end.next_step() == Ended("closed by the peer")  # ended stays ended


def test_each_way_a_connection_ends_says_why_and_what_is_sent_last() -> None:
    # Closed before its HELLO: nothing sent.
    _, end = _pair()
    end.receive_data(b"")
    assert end.next_step() == Ended("closed by the peer before its HELLO")
    # A frame other than HELLO first: closed, nothing sent.
    peer, end = _pair()
    end.receive_data(peer.send(ErrorFrame("no")))
    assert end.next_step() == Ended("ErrorFrame before HELLO")
    # The wrong cookie: a protocol error, answered with ERROR.
    _, end = _pair()
    stranger = ConnectorConnection(Role.CONNECTOR, twopc=True, cookie=b"wrong")
    end.receive_data(stranger.send(_hello(b"wrong")))
    step = end.next_step()
    assert type(step) is Ended and step.reason.startswith("protocol error: ")
    stranger.receive_data(step.last)
    error = stranger.next_event()
    assert type(error) is ErrorFrame and error.reason in step.reason
    # The peer's ERROR once linked.
    peer, end = _pair()
    end.receive_data(peer.send(_hello()))
    assert type(end.next_step()) is Accepted
    end.receive_data(peer.send(ErrorFrame("shutting down")))
    assert end.next_step() == Ended("the peer sent ERROR: shutting down")
    # A frame the sink refuses: ERROR with the reason, then the end.
    peer, end = _pair()
    end.receive_data(peer.send(_hello()))
    accepted = end.next_step()
    assert type(accepted) is Accepted
    peer.receive_data(accepted.reply)
    step = end.refused(ValueError("this sink takes stream 1 only, not 2"))
    assert step.reason == "refused: this sink takes stream 1 only, not 2"
    assert end.next_step() == step  # nothing is taken after a refusal
    peer.receive_data(step.last)
    assert peer.next_event() == Ok(SINK_CREDITS)
    assert peer.next_event() == ErrorFrame("this sink takes stream 1 only, not 2")


def test_the_newest_accepted_connection_is_served_and_replaces_the_one_before() -> None:
    door: SinkDoor[str] = SinkDoor()
    assert door.admit("a") is None and door.served == "a"
    assert door.admit("a") is None  # the same one again replaces nothing
    assert door.admit("b") == "a" and door.served == "b"
    door.left("a")  # the replaced one ending leaves the newer served
    assert door.served == "b"
    door.left("b")
    assert door.served is None
