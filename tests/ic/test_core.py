"""The coordinator's core, fed the binding's real bytes in memory: the actions it asks
for, what it refuses (a message out of turn is a protocol error, never an assertion),
and that how a stream is cut into reads changes nothing it decides."""

from __future__ import annotations

import pytest
from ambrosia_ic.coordinator.core import (
    WAKE,
    CheckpointReceived,
    CoordinatorCore,
    Deliver,
    Durable,
    InitialReceived,
    LogLine,
    OpenLink,
)
from ambrosia_ic.coordinator.frames import LinkRecord
from ambrosia_ic.coordinator.phase import Phase
from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import RemoteProtocolError
from ambrosia_core.wire import (
    AttachTo,
    Checkpoint,
    InitialMessage,
    OutgoingRpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    encode_control_record,
)


def checkpoint_bytes(data: bytes) -> bytes:
    return Checkpoint(len(data)).encode() + data


def test_a_first_start_gets_the_initial_message_then_checkpoint_one_whole() -> None:
    core = CoordinatorCore("me", 7)
    core.begin_first_start()
    assert core.take_actions() == [
        Deliver(encode_control_record(7, TakeBecomingPrimaryCheckpoint()))]
    assert core.phase is Phase.FIRST_START and core.binding_primary
    core.receive_binding(InitialMessage(b"hello").encode())
    core.receive_binding(OutgoingRpc("peer", 3, 1, b"x").encode())  # before the checkpoint
    core.receive_binding(checkpoint_bytes(b"state")[:4])
    assert core.take_actions() == [InitialReceived(InitialMessage(b"hello")),
                                   OpenLink("peer")]
    core.receive_binding(checkpoint_bytes(b"state")[4:])
    [got] = core.take_actions()
    assert isinstance(got, CheckpointReceived) and (got.n, got.position) == (1, (0, {}))
    message, chunks, outputs = got.data
    assert (message, b"".join(chunks)) == (Checkpoint(5).encode(), b"state")
    # The call sent before the Checkpoint message is in its snapshot, not yet logged there.
    assert outputs["peer"] == {"next": 2, "unacked": [[1, OutgoingRpc("peer", 3, 1, b"x")
                                                       .incoming().encode()]]}
    assert core.checkpoint_expected is None


@pytest.mark.parametrize(("setup", "data", "why"), [
    ("", checkpoint_bytes(b"s"), "a Checkpoint the coordinator did not ask for"),
    ("", InitialMessage(b"i").encode(), "an InitialMessage outside a first start"),
    ("first", checkpoint_bytes(b"s"), "a Checkpoint before the InitialMessage"),
    ("", TakeBecomingPrimaryCheckpoint().encode(), "not allowed binding -> coordinator"),
    ("", b"\x7f\x00", "truncated|size|unknown|malformed"),
])
def test_a_message_out_of_turn_is_a_protocol_error(setup: str, data: bytes, why: str) -> None:
    core = CoordinatorCore("me", 7)
    if setup == "first":
        core.begin_first_start()
    with pytest.raises(RemoteProtocolError, match=why):
        core.receive_binding(data)
        core.receive_binding(bytes(200))  # whatever would complete a frame cut short


def test_a_binding_asking_for_a_checkpoint_wakes_the_committer_only_when_live() -> None:
    core = CoordinatorCore("me", 7)
    core.receive_binding(TakeCheckpoint().encode())
    assert not core.take_actions() and not core.ckpt.switch_wanted
    core.set_phase(Phase.RECOVERING)
    core.set_phase(Phase.LIVE)
    core.receive_binding(TakeCheckpoint().encode())
    assert core.take_actions() == [WAKE] and core.ckpt.switch_wanted


def live_core() -> CoordinatorCore:
    core = CoordinatorCore("me", 7)
    core.set_phase(Phase.RECOVERING)
    core.set_phase(Phase.LIVE)
    return core


def test_every_effect_is_an_action_the_committer_woken_once_between_takes() -> None:
    core = live_core()
    body = OutgoingRpc("me", 3, 1, b"x").incoming().encode()
    for seq in (1, 2, 3):
        core.link_record("peer", LinkRecord(seq, body, 1))
    assert core.take_actions() == [WAKE]
    record = core.take(1 << 20)
    assert core.take_actions() == []  # taken is not durable: nothing goes out yet
    core.durable(record, log_size=100)
    assert core.take_actions() == [Durable(record.wire, {"peer": 3})]
    core.link_record("peer", LinkRecord(4, body, 1))
    assert core.take_actions() == [WAKE]


def test_a_checkpoint_comes_back_with_the_log_position_it_was_asked_at() -> None:
    core = live_core()
    body = OutgoingRpc("me", 3, 1, b"x").incoming().encode()

    def commit(seq: int) -> None:
        core.link_record("peer", LinkRecord(seq, body, 1))
        core.durable(core.take(1 << 20), log_size=100)

    commit(1)
    core.receive_binding(TakeCheckpoint().encode())  # the binding asks for one
    core.take_actions()
    core.switch_log(2, checkpoint=True)
    assert core.take_actions() == [Deliver(encode_control_record(7, TakeCheckpoint()))]
    commit(2)  # the next log's first record, before the binding answers
    core.receive_binding(checkpoint_bytes(b"state"))
    got = [a for a in core.take_actions() if isinstance(a, CheckpointReceived)]
    assert [(a.n, a.position) for a in got] == [(2, (1, {"peer": 1}))]


def test_impulses_before_live_are_dropped_with_a_line_unless_primary_or_kept() -> None:
    impulse = OutgoingRpc("", 3, 2, b"i").encode()  # an Impulse to itself
    dropping = CoordinatorCore("me", 7)
    dropping.begin_recovery(0, 0, {}, {})
    dropping.receive_binding(impulse)
    assert (list(dropping.group.pending), dropping.take_actions()) == (
        [], [LogLine("dropped an Impulse the binding sent while recovering")])
    for core in (CoordinatorCore("me", 7, keeps_early_impulses=True),
                 CoordinatorCore("me", 7)):
        if not core.keeps_early_impulses:
            core.begin_first_start()  # primary once asked for its first checkpoint
            core.take_actions()  # the request
        core.receive_binding(impulse)
        assert len(core.group.pending) == 1 and not core.take_actions()


def test_a_link_is_asked_for_once_per_destination() -> None:
    core = CoordinatorCore("me", 7)
    core.receive_binding(AttachTo("a").encode() + AttachTo("me").encode() + AttachTo("").encode()
                         + OutgoingRpc("a", 1, 1, b"").encode()
                         + OutgoingRpc("b", 1, 1, b"").encode() + AttachTo("b").encode())
    assert core.take_actions() == [OpenLink("a"), OpenLink("b")]


outputs = st.lists(st.one_of(
    st.builds(lambda d, m, t, a: OutgoingRpc(d, m, t, a), st.sampled_from(["", "me", "a", "b"]),
              st.integers(0, 9), st.sampled_from([1, 2]), st.binary(max_size=40))
    .map(lambda r: r.encode()),
    st.lists(st.builds(lambda d, m, a: OutgoingRpc(d, m, 1, a), st.sampled_from(["", "a"]),
                       st.integers(0, 9), st.binary(max_size=10)), min_size=1, max_size=3)
    .map(lambda rs: RpcBatch(rs).encode()),
    st.sampled_from([AttachTo("b").encode(), TakeCheckpoint().encode()]),
), max_size=12).map(b"".join)


def _decided(core: CoordinatorCore) -> object:
    return (list(core.group.pending), core.take_actions(), core.self_calls.next,
            {d: (box.next_seq, list(box.unacked), list(box.impulses))
             for d, box in core.outboxes.items()}, core.ckpt.state)


@settings(max_examples=200, deadline=None)
@given(outputs, st.lists(st.integers(1, 60), max_size=8))
def test_how_the_binding_stream_is_cut_into_reads_changes_nothing(data: bytes,
                                                                  cuts: list[int]) -> None:
    whole, pieces = CoordinatorCore("me", 7), CoordinatorCore("me", 7)
    for core in (whole, pieces):
        core.set_phase(Phase.RECOVERING)
        core.set_phase(Phase.LIVE)
    whole.receive_binding(data)
    at = 0
    for n in cuts:
        pieces.receive_binding(data[at:at + n])
        at += n
    pieces.receive_binding(data[at:])
    assert _decided(pieces) == _decided(whole)
