"""An inbound link's rules with no I/O (``coordinator.inbound.InboundLink``): the exact
actions for each thing that can happen to a connection, from the challenge to the close.
The link server's tests run the same rules over real sockets."""

from __future__ import annotations

import pytest
from ambrosia_ic.coordinator.frames import LinkRecord
from ambrosia_ic.coordinator.inbound import (
    WATCH_SENDER,
    Arm,
    Ask,
    Close,
    Disarm,
    InboundAction,
    InboundLink,
    Joined,
    Left,
    Log,
    Records,
    Send,
    Unwatched,
    Watching,
)
from ambrosia_ic.links.handshake import (
    CHALLENGE_SIZE,
    HANDSHAKE_TIMEOUT,
    make_hello,
    reply_position,
)

from ambrosia_core.errors import UnexpectedMessageError
from ambrosia_core.wire import Rpc, encode_record, encode_zz32

SECRET = b"k" * 32
PEER = "127.0.0.1:40000"


def _record(seq: int, calls: int = 1) -> bytes:
    return encode_record(0, seq, b"".join(Rpc(7, 1, bytes((seq, i))).encode()
                                          for i in range(calls)))


def _sent(actions: list[InboundAction]) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, Send))


def _greeted(sender: str = "A", name: str = "B",
             secret: bytes = SECRET) -> tuple[InboundLink, bytes, bytes, bytes]:
    """A link that sent its challenge; the hello a sender answers it with."""
    link = InboundLink(SECRET, name, PEER, stall_seconds=2.5)
    start = link.start()
    assert start[1:] == [Arm(HANDSHAKE_TIMEOUT)]
    head = _sent(start)
    assert len(head) == CHALLENGE_SIZE
    hello, nonce_c = make_hello(head, secret, sender, name, PEER)
    return link, head, hello, nonce_c


def _linked(logged: int = 0) -> InboundLink:
    link, _, hello, _ = _greeted()
    assert link.receive(hello) == [Ask("A", False)]
    assert link.answer(logged)[2:] == [Joined("A")]
    return link


@pytest.mark.parametrize("cut", [1, 7, 40])
def test_a_hello_in_pieces_is_asked_about_once_whole_and_answered_with_the_position(
        cut: int) -> None:
    link, head, hello, nonce_c = _greeted()
    assert link.receive(hello[:cut]) == []
    assert link.receive(hello[cut:]) == [Ask("A", False)]
    # Bytes read while the answer is awaited are kept, not taken for records yet.
    assert link.receive(_record(5)[:3]) == []
    actions = link.answer(4)
    assert actions[:1] == [Disarm()] and actions[2:3] == [Joined("A")]
    assert reply_position(_sent(actions), SECRET, head, nonce_c, "B", PEER) == 4
    assert actions[3:] == [Records("A", []), Arm(2.5)]  # a record begun: it must follow
    assert link.sender == "A"
    rest = link.receive(_record(5)[3:])
    assert rest == [Records("A", [LinkRecord(5, Rpc(7, 1, bytes((5, 0))).encode(), 1)]),
                    Disarm()]


def test_records_right_behind_the_hello_are_handed_on_once_admitted() -> None:
    link, _, hello, _ = _greeted()
    assert link.receive(hello + _record(1) + _record(3, 2)) == [Ask("A", False)]
    actions = link.answer(0)
    assert [type(a) for a in actions] == [Disarm, Send, Joined, Records, Disarm]
    records = actions[3]
    assert isinstance(records, Records)
    assert [(r.seq_id, r.calls) for r in records.records] == [(1, 1), (3, 2)]


def test_a_wrong_proof_is_refused_in_one_line_and_nothing_more_is_read() -> None:
    link, _, hello, _ = _greeted(secret=b"x" * 32)
    assert link.receive(hello) == [
        Log(f"refused a link from {PEER}: peer claiming to be 'A' failed the link "
            "authentication"), Disarm(), Close()]
    assert link.ended
    assert link.receive(_record(1)) == []
    assert link.closed() == [Disarm()]  # refused: nothing was joined


def test_a_hello_for_another_instance_is_refused() -> None:
    link = InboundLink(SECRET, "B", PEER)
    head = _sent(link.start())
    hello, _ = make_hello(head, SECRET, "A", "C", PEER)
    assert link.receive(hello)[0] == Log(
        f"refused a link from {PEER}: peer 'A' wanted 'C', this is 'B'")


def test_a_hello_naming_an_instance_too_long_is_refused_before_it_is_whole() -> None:
    link = InboundLink(SECRET, "B", PEER)
    link.start()
    assert link.receive(encode_zz32(129) + b"a" * 10) == [
        Log(f"refused a link from {PEER}: link handshake names an instance of 129 bytes"),
        Disarm(), Close()]


def test_a_sender_not_registered_is_refused_when_the_answer_comes() -> None:
    link, _, hello, _ = _greeted()
    assert link.receive(hello) == [Ask("A", False)]
    assert link.answer(None) == [
        Log(f"refused a link from {PEER}: peer 'A' is not a registered instance"),
        Disarm(), Close()]
    assert link.sender is None


def test_the_handshake_s_time_running_out_refuses_before_or_after_the_hello() -> None:
    link, _, hello, _ = _greeted()
    assert link.timed_out() == [Log(f"refused a link from {PEER}: TimeoutError"), Disarm(),
                                Close()]
    link, _, hello, _ = _greeted()
    link.receive(hello)
    assert link.timed_out()[0] == Log(f"refused a link from {PEER}: TimeoutError")
    assert link.answer(3) == []  # the lookup came back too late: nothing is sent


def test_a_peer_that_closes_during_the_handshake_is_logged_once() -> None:
    link, _, hello, _ = _greeted()
    link.receive(hello[:10])
    assert link.closed() == [
        Log(f"refused a link from {PEER}: the peer closed during the link handshake"),
        Disarm(), Close()]
    assert link.closed() == [Disarm()]


def test_a_standby_s_watch_is_answered_with_the_epoch_and_then_only_watched() -> None:
    link, head, hello, nonce_c = _greeted(sender=WATCH_SENDER)
    assert link.receive(hello) == [Ask(WATCH_SENDER, True)]
    actions = link.answer(7)
    assert actions[0] == Disarm() and actions[2:] == [Watching()]
    assert reply_position(_sent(actions), SECRET, head, nonce_c, "B", PEER) == 7
    assert link.receive(_record(1)) == []  # a watch's bytes are not records
    assert link.closed() == [Disarm(), Unwatched()]


def test_a_watch_on_a_replica_holding_no_epoch_is_refused() -> None:
    link, _, hello, _ = _greeted(sender=WATCH_SENDER)
    link.receive(hello)
    assert link.answer(None)[0] == Log(
        f"refused a link from {PEER}: a standby's watch, but this replica is not the "
        "primary")


def test_a_sender_that_stops_inside_a_record_is_dropped_when_the_timer_fires() -> None:
    link = _linked()
    assert link.receive(_record(1)[:9]) == [Records("A", []), Arm(2.5)]
    assert link.timed_out() == [
        Log("link from A sent part of a record and nothing more for 2.5 s; closed (it "
            "sends again from the position acknowledged)"), Close()]
    assert link.receive(_record(1)[9:]) == []
    assert link.closed() == [Disarm(), Left("A")]


def test_a_broken_record_drops_the_link_with_one_line_and_the_sender_leaves_on_close(
        ) -> None:
    link = _linked()
    bad = bytearray(_record(1))
    bad[-1] ^= 1
    assert link.receive(_record(0) + bytes(bad))[0] == Log(
        "link from A broke the protocol: link record check bytes do not match (record "
        "seq 1)")
    assert link.receive(_record(2)) == []
    assert link.closed("the TLS record's MAC did not check") == [
        Disarm(), Log("link from A closed: the TLS record's MAC did not check"), Left("A")]


def test_a_gap_found_where_records_are_taken_drops_the_link() -> None:
    link = _linked()
    assert link.broken(UnexpectedMessageError("link calls 4..4 from A after 1")) == [
        Log("link from A broke the protocol: link calls 4..4 from A after 1"), Disarm(),
        Close()]
    assert link.broken(UnexpectedMessageError("again")) == []
    assert link.closed() == [Disarm(), Left("A")]
