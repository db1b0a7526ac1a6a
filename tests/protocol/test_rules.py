"""The rules of normal processing, and every protocol violation the document names."""

from __future__ import annotations

import pytest

from ambrosia_core.errors import (
    ChecksumMismatchError,
    EncodeError,
    LocalProtocolError,
    RemoteProtocolError,
    SequenceGapError,
    UnexpectedMessageError,
)
from ambrosia_core.wire import (
    NEED_DATA,
    BecomingPrimary,
    InitialMessage,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    UpgradeService,
    UpgradeTakeCheckpoint,
)
from ambrosia_py.errors import ImpulseDuringRecoveryError
from ambrosia_py.protocol import (
    BecamePrimary,
    BindingConnection,
    CheckpointReason,
    CheckpointRequested,
    FirstStart,
    IncomingRpc,
    InitialMessageReceived,
    RecoveryComplete,
    State,
)

from .helpers import LIVE, PRIMARY, REPLAY, checkpoint, control, data, drain, feed, h

R1 = Rpc(1, 1, b"a")
R2 = Rpc(2, 1, b"b")
R3 = Rpc(3, 0, b"c")


def primary(name: str = "me") -> BindingConnection:
    """A connection that went through a first start and has seen its echo (seq 0)."""
    c = BindingConnection(name)
    feed(c, control(TakeBecomingPrimaryCheckpoint()))
    c.send_initial_message(b"")
    c.send_checkpoint(b"")
    feed(c, data(0, InitialMessage(b"")))
    assert c.state is State.PRIMARY
    return c


def recovering(name: str = "me") -> BindingConnection:
    """A connection that loaded a checkpoint and replayed one record (seq 0)."""
    c = BindingConnection(name)
    feed(c, checkpoint(b"ck") + data(0, R1))
    assert c.state is State.RECOVERING
    return c


# ------------------------------------------------------- nothing while a checkpoint is owed


def test_first_start_dispatches_nothing_before_the_checkpoint_is_sent() -> None:
    c = BindingConnection("me")
    stream = control(TakeBecomingPrimaryCheckpoint()) + data(0, InitialMessage(b"i")) + data(1, R1)
    assert feed(c, stream) == [(FirstStart(), LIVE)]
    assert c.next_event() is NEED_DATA and c.next_event() is NEED_DATA
    c.send_initial_message(b"i")
    assert drain(c) == [(CheckpointRequested(CheckpointReason.FIRST_START), LIVE)]
    assert c.next_event() is NEED_DATA
    c.begin_checkpoint(3)
    c.checkpoint_data(b"x")
    assert drain(c) == []
    c.checkpoint_data(b"y")
    assert drain(c) == []
    c.checkpoint_data(b"z")
    assert drain(c) == [
        (BecamePrimary(recovered=False, checkpointed=True), PRIMARY),
        (InitialMessageReceived(b"i", 0, False), PRIMARY),
        (IncomingRpc(R1, 1, False), PRIMARY),
    ]


def test_messages_packed_behind_a_take_checkpoint_wait_for_the_checkpoint() -> None:
    c = primary()
    stream = data(1, R1, TakeCheckpoint(), R2, R3) + data(2, R1)
    assert feed(c, stream) == [
        (IncomingRpc(R1, 1, False), PRIMARY),
        (CheckpointRequested(CheckpointReason.PERIODIC), PRIMARY),
    ]
    with pytest.raises(LocalProtocolError):
        c.send_rpc("", 1, 1, b"")  # no state-changing output while the snapshot is owed
    c.begin_checkpoint(4)
    for piece in (b"a", b"bc"):
        c.checkpoint_data(piece)
        assert c.next_event() is NEED_DATA
    c.checkpoint_data(b"d")
    assert drain(c) == [
        (IncomingRpc(R2, 1, False), PRIMARY),
        (IncomingRpc(R3, 1, False), PRIMARY),
        (IncomingRpc(R1, 2, False), PRIMARY),
    ]


def test_messages_behind_take_becoming_primary_checkpoint_are_live_after_it() -> None:
    c = recovering()
    stream = data(1, R2) + control(TakeBecomingPrimaryCheckpoint()) + data(2, R3)
    assert feed(c, stream) == [
        (IncomingRpc(R2, 1, True), REPLAY),
        (RecoveryComplete(2), LIVE),
        (CheckpointRequested(CheckpointReason.BECOMING_PRIMARY), LIVE),
    ]
    c.send_checkpoint(b"snap")
    assert drain(c) == [
        (BecamePrimary(recovered=True, checkpointed=True), PRIMARY),
        (IncomingRpc(R3, 2, False), PRIMARY),
    ]


def test_checkpoint_bytes_cannot_be_sent_unasked_or_beyond_their_announced_size() -> None:
    c = primary()
    with pytest.raises(LocalProtocolError):
        c.begin_checkpoint(1)  # none owed
    with pytest.raises(LocalProtocolError):
        c.checkpoint_data(b"x")  # none announced
    feed(c, control(TakeCheckpoint()))
    assert c.begin_checkpoint(3) == h("04 08 06")
    with pytest.raises(LocalProtocolError):
        c.begin_checkpoint(3)  # already being sent
    assert c.checkpoint_data(b"ab") == b"ab"
    with pytest.raises(LocalProtocolError, match="exceed"):
        c.checkpoint_data(b"cd")
    # the refusal changed nothing: the right byte still completes the checkpoint
    assert c.owes_checkpoint
    assert c.checkpoint_data(b"c") == b"c"
    assert c.state is State.PRIMARY
    with pytest.raises(LocalProtocolError):
        c.checkpoint_data(b"")
    with pytest.raises(EncodeError):
        BindingConnection().begin_checkpoint(-1)


# ---------------------------------------------------------------- Impulses only when primary


def test_impulse_while_recovering_is_refused_without_breaking_the_connection() -> None:
    c = recovering()
    with pytest.raises(ImpulseDuringRecoveryError):
        c.send_rpc("svc", 4, 2, b"")
    with pytest.raises(ImpulseDuringRecoveryError):
        c.send_rpcs([OutgoingRpc("svc", 4, 1, b""), OutgoingRpc("other", 4, 2, b"")])
    assert c.state is State.RECOVERING and c.is_replaying
    # nothing was recorded by the refused batch: "svc" is attached by the next call to it
    assert c.send_rpc("svc", 4, 1, b"") == h("08 01 737663") + h("10 00 06 737663 00 08 01")
    assert feed(c, data(1, R2)) == [(IncomingRpc(R2, 1, True), REPLAY)]


def test_impulse_right_after_the_checkpoint_load_is_refused() -> None:
    c = BindingConnection("me")
    feed(c, checkpoint(b"ck"))
    assert c.state is State.CHECKPOINT_LOADED
    with pytest.raises(ImpulseDuringRecoveryError):
        c.send_rpc("", 4, 2, b"")
    assert c.send_rpc("", 4, 1, b"") == h("0a 00 00 00 08 01")
    assert c.state is State.CHECKPOINT_LOADED


@pytest.mark.parametrize("before_initial_message", [True, False])
def test_impulse_before_the_first_start_checkpoint_is_refused(before_initial_message: bool) -> None:
    c = BindingConnection("me")
    feed(c, control(TakeBecomingPrimaryCheckpoint()))
    if not before_initial_message:
        c.send_initial_message(b"")
    state = c.state
    with pytest.raises(ImpulseDuringRecoveryError):
        c.send_rpc("", 4, 2, b"")
    assert c.state is state
    if before_initial_message:
        c.send_initial_message(b"")
    drain(c)
    c.send_checkpoint(b"")
    assert c.send_rpc("", 4, 2, b"") == h("0a 00 00 00 08 02")


def test_impulse_while_the_primary_owes_a_checkpoint_is_not_a_recovery_error() -> None:
    c = primary()
    feed(c, control(TakeCheckpoint()))
    with pytest.raises(LocalProtocolError) as info:
        c.send_rpc("", 4, 2, b"")
    assert not isinstance(info.value, ImpulseDuringRecoveryError)
    c.send_checkpoint(b"")
    assert c.send_rpc("", 4, 2, b"") == h("0a 00 00 00 08 02")


def test_a_return_value_is_never_an_impulse() -> None:
    c = recovering()
    # reserved byte 1 marks a return value; its rpc_type field is not sent
    assert c.send_rpc("", 0, 2, b"v", reserved=1) == h("08 00 00 01 76")


# ---------------------------------------------------------------- attach before send


def test_attach_to_goes_out_once_per_destination_and_never_for_self() -> None:
    c = primary("me")
    attach_a, rpc_a = h("04 01 61"), h("0c 00 02 61 00 02 01")
    assert c.send_rpc("a", 1, 1, b"") == attach_a + rpc_a
    assert c.send_rpc("a", 1, 1, b"") == rpc_a
    assert c.send_rpc("", 1, 1, b"") == h("0a 00 00 00 02 01")
    assert c.send_rpc("me", 1, 1, b"") == h("0a 00 00 00 02 01")  # own name: a self-call


def test_attach_to_goes_before_a_batch_that_names_new_destinations() -> None:
    c = primary("me")
    c.send_rpc("a", 1, 1, b"")
    batch = [
        OutgoingRpc("b", 1, 1, b""),
        OutgoingRpc("a", 2, 0, b"x"),
        OutgoingRpc("me", 3, 2, b""),
        OutgoingRpc("c", 4, 1, b""),
        OutgoingRpc("b", 5, 1, b""),
    ]
    assert c.send_rpcs(batch) == h(
        "04 01 62"  # AttachTo "b"
        "04 01 63"  # AttachTo "c"
        "4a 05 0a"  # size 37, RPCBatch, count 5
        "0c 00 02 62 00 02 01"  # size 6, RPC to "b", reserved, method 1, fork
        "0e 00 02 61 00 04 00 78"  # size 7, RPC to "a", reserved, method 2, async, "x"
        "0a 00 00 00 06 02"  # size 5, RPC to self, reserved, method 3, impulse
        "0c 00 02 63 00 08 01"  # to "c", method 4, fork
        "0c 00 02 62 00 0a 01"  # to "b", method 5, fork
    )
    assert c.send_rpcs([OutgoingRpc("c", 1, 1, b"")]) == h("0c 00 02 63 00 02 01")
    assert c.send_rpcs([]) == b""


def test_attach_to_while_replaying_also_counts_once() -> None:
    c = recovering()
    assert c.send_rpcs([OutgoingRpc("a", 1, 1, b"")]) == h("04 01 61 0c 00 02 61 00 02 01")
    feed(c, control(BecomingPrimary()))
    assert c.is_primary
    assert c.send_rpc("a", 1, 1, b"") == h("0c 00 02 61 00 02 01")


# ---------------------------------------------------------------- coordinator violations


def _assert_broken(c: BindingConnection) -> None:
    assert c.state is State.ERROR and not c.is_primary and not c.is_replaying
    with pytest.raises(LocalProtocolError):
        c.next_event()
    with pytest.raises(LocalProtocolError):
        c.receive_data(data(99, R1))
    with pytest.raises(LocalProtocolError):
        c.send_rpc("", 1, 1, b"")
    with pytest.raises(LocalProtocolError):
        c.send_rpc("", 1, 2, b"")
    with pytest.raises(LocalProtocolError):
        c.request_checkpoint()
    with pytest.raises(LocalProtocolError):
        c.begin_checkpoint(0)


PRIMARY_VIOLATIONS = {
    "BecomingPrimary": control(BecomingPrimary()),
    "TakeBecomingPrimaryCheckpoint": control(TakeBecomingPrimaryCheckpoint()),
    "UpgradeTakeCheckpoint": control(UpgradeTakeCheckpoint()),
    "UpgradeService": control(UpgradeService()),
    "checkpoint record": checkpoint(b"again"),
}


@pytest.mark.parametrize("payload", PRIMARY_VIOLATIONS.values(), ids=PRIMARY_VIOLATIONS.keys())
def test_start_up_message_while_primary_breaks_the_connection(payload: bytes) -> None:
    c = primary()
    c.receive_data(data(1, R1) + payload)
    assert c.next_event() == IncomingRpc(R1, 1, False)
    with pytest.raises(UnexpectedMessageError) as info:
        c.next_event()
    assert isinstance(info.value, RemoteProtocolError)  # the coordinator's fault
    assert info.value.seq_id == 1  # the last data record before the bad one
    assert "PRIMARY" in str(info.value)
    _assert_broken(c)


def test_becoming_primary_as_the_first_record_breaks_the_connection() -> None:
    c = BindingConnection("me")
    c.receive_data(control(BecomingPrimary()))
    with pytest.raises(UnexpectedMessageError, match="START"):
        c.next_event()
    _assert_broken(c)


def test_becoming_primary_after_a_first_start_breaks_the_connection() -> None:
    c = BindingConnection("me")
    feed(c, control(TakeBecomingPrimaryCheckpoint()) + control(BecomingPrimary()))
    c.send_initial_message(b"")
    c.send_checkpoint(b"")
    assert c.next_event() == CheckpointRequested(CheckpointReason.FIRST_START)
    assert c.next_event() == BecamePrimary(recovered=False, checkpointed=True)
    with pytest.raises(UnexpectedMessageError):
        c.next_event()
    _assert_broken(c)


def test_an_rpc_before_any_start_up_message_breaks_the_connection() -> None:
    c = BindingConnection("me")
    c.receive_data(data(0, R1))
    with pytest.raises(UnexpectedMessageError) as info:
        c.next_event()
    assert info.value.seq_id == 0
    _assert_broken(c)


@pytest.mark.parametrize(
    "between",
    [data(0, R1), control(TakeCheckpoint()), control(UpgradeService())],
    ids=["after a replayed record", "after a checkpoint was taken", "twice"],
)
def test_upgrade_service_later_than_right_after_the_load_is_rejected(between: bytes) -> None:
    c = BindingConnection("me")
    c.receive_data(checkpoint(b"ck") + between)
    steps = drain(c)
    if c.owes_checkpoint:
        c.send_checkpoint(b"")
        steps += drain(c)
    c.receive_data(control(UpgradeService()))
    with pytest.raises(UnexpectedMessageError, match="UpgradeService"):
        c.next_event()
    _assert_broken(c)


def test_a_second_checkpoint_while_recovering_is_rejected() -> None:
    c = recovering()
    c.receive_data(checkpoint(b"two"))
    with pytest.raises(UnexpectedMessageError):
        c.next_event()
    _assert_broken(c)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (data(2, R2), SequenceGapError),
        (data(1, R2)[:8] + b"\x00" * 8 + data(1, R2)[16:], ChecksumMismatchError),
    ],
    ids=["sequence gap", "check bytes"],
)
def test_bad_records_break_the_connection(payload: bytes, error: type[Exception]) -> None:
    c = recovering()
    c.receive_data(payload)
    with pytest.raises(error):
        c.next_event()
    _assert_broken(c)


# ------------------------------------------------------- local misuse is refused, harmlessly


def test_local_misuse_is_refused_and_changes_nothing() -> None:
    c = BindingConnection("me")
    with pytest.raises(LocalProtocolError):
        c.send_initial_message(b"")  # not asked for
    with pytest.raises(LocalProtocolError):
        c.send_rpc("", 1, 1, b"")  # nothing to send from before start-up
    feed(c, control(TakeBecomingPrimaryCheckpoint()))
    with pytest.raises(LocalProtocolError):
        c.send_rpc("a", 1, 1, b"")  # the InitialMessage comes first
    with pytest.raises(LocalProtocolError):
        c.request_checkpoint()
    c.send_initial_message(b"")
    with pytest.raises(LocalProtocolError):
        c.send_initial_message(b"")  # once
    assert c.state is State.BECOMING_PRIMARY_CHECKPOINT
    drain(c)
    c.send_checkpoint(b"")
    assert drain(c) == [(BecamePrimary(recovered=False, checkpointed=True), PRIMARY)]
    # "a" was never attached by the refused call
    assert c.send_rpc("a", 1, 1, b"") == h("04 01 61 0c 00 02 61 00 02 01")


def test_request_checkpoint_is_refused_while_recovering() -> None:
    c = recovering()
    with pytest.raises(LocalProtocolError):
        c.request_checkpoint()
    assert c.state is State.RECOVERING


def test_a_long_run_of_empty_batches_is_skipped_without_recursion() -> None:
    c = primary()
    batches = [RpcBatch(()) for _ in range(5000)]
    assert feed(c, data(1, *batches, R1, *batches) + data(2, R2)) == [
        (IncomingRpc(R1, 1, False), PRIMARY),
        (IncomingRpc(R2, 2, False), PRIMARY),
    ]
