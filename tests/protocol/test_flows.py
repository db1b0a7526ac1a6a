"""The protocol document's start-up flows, byte for byte through ``BindingConnection``.

Every flow runs with the coordinator's bytes fed whole, one byte at a time and seven bytes at
a time; the events (checkpoint chunks joined) and the flags after each event must be the same.
The binding's output is checked against golden bytes written by hand.
"""

from __future__ import annotations

import pytest

from ambrosia_core.wire import (
    BecomingPrimary,
    CountReplayableRpcBatch,
    InitialMessage,
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
    CheckpointLoadChunk,
    CheckpointLoaded,
    CheckpointLoadStarted,
    CheckpointReason,
    CheckpointRequested,
    FirstStart,
    IncomingRpc,
    InitialMessageReceived,
    RecoveryComplete,
    State,
    UpgradeRequested,
)

from .helpers import LIVE, PRIMARY, REPLAY, checkpoint, control, data, drain, feed, h

PIECES = pytest.mark.parametrize("piece", [0, 1, 7], ids=["whole", "bytewise", "by7"])

BLOB = b"state:0123456789"  # 16 bytes
R1 = Rpc(1, 1, b"a")
R2 = Rpc(2, 0, b"bb")
R3 = Rpc(-3, 1, b"")
R4 = Rpc(70, 2, b'{"k":1}')  # a two-byte method id; an Impulse in the log

# A fork to self (method 8) and to "svc" (method 5), as the binding sends them.
SELF_FORK_8 = h("0e 00 00 00 10 01 7b7d")  # size 7, RPC, no name, reserved, zz(8), fork, "{}"
ATTACH_SVC = h("08 01 737663")  # size 4, AttachTo, "svc"
SVC_FORK_5 = h("10 00 06 737663 00 0a 01")  # size 8, RPC, zz(3) "svc", reserved, zz(5), fork


def loaded(size: int = 16, blob: bytes = BLOB) -> list[tuple[object, tuple[bool, bool]]]:
    return [
        (CheckpointLoadStarted(size), REPLAY),
        (CheckpointLoadChunk(blob), REPLAY),
        (CheckpointLoaded(size), REPLAY),
    ]


@PIECES
def test_first_start(piece: int) -> None:
    c = BindingConnection("me")
    assert (c.state, c.is_primary, c.is_replaying) == (State.START, False, False)
    assert feed(c, control(TakeBecomingPrimaryCheckpoint()), piece) == [(FirstStart(), LIVE)]
    assert c.state is State.FIRST_START

    assert c.send_initial_message(b"hello") == h("0c 09 68656c6c6f")
    assert drain(c) == [(CheckpointRequested(CheckpointReason.FIRST_START), LIVE)]
    assert c.owes_checkpoint and not c.is_primary

    assert c.send_checkpoint(b"abc") == h("04 08 06 616263")
    assert drain(c) == [(BecamePrimary(recovered=False, checkpointed=True), PRIMARY)]
    assert c.state is State.PRIMARY and not c.upgraded

    echo = data(0, InitialMessage(b"hello"))
    assert echo[24:] == h("0c 09 68656c6c6f")  # the echo is the message, size included
    steps = feed(c, echo + data(1, R1, R2) + data(2, R4), piece)
    assert steps == [
        (InitialMessageReceived(b"hello", 0, False), PRIMARY),
        (IncomingRpc(R1, 1, False), PRIMARY),
        (IncomingRpc(R2, 1, False), PRIMARY),
        (IncomingRpc(R4, 2, False), PRIMARY),
    ]
    assert c.committer_id == 0x2A and c.last_seq_id == 2 and c.messages_replayed == 0

    # Impulses are legal now, and the binding may ask for a checkpoint
    assert c.send_rpc("", 8, 2, b"{}") == h("0e 00 00 00 10 02 7b7d")
    assert c.request_checkpoint() == h("02 02")
    assert feed(c, control(TakeCheckpoint()), piece) == [
        (CheckpointRequested(CheckpointReason.PERIODIC), PRIMARY)
    ]
    assert c.state is State.PRIMARY_CHECKPOINT and c.is_primary
    assert c.send_checkpoint(b"") == h("04 08 00")
    assert drain(c) == []  # a periodic checkpoint announces nothing
    assert c.state is State.PRIMARY


@PIECES
def test_standalone_recovery(piece: int) -> None:
    c = BindingConnection("me")
    head = checkpoint(BLOB) + data(5, R1) + data(6, RpcBatch((R2, R3)))
    assert feed(c, head, piece) == [
        *loaded(),
        (IncomingRpc(R1, 5, True), REPLAY),
        (IncomingRpc(R2, 6, True), REPLAY),
        (IncomingRpc(R3, 6, True), REPLAY),
    ]
    assert c.state is State.RECOVERING
    # replayed calls still send their outputs (the coordinator drops duplicates)
    assert c.send_rpc("svc", 5, 1, b"") == ATTACH_SVC + SVC_FORK_5
    with pytest.raises(ImpulseDuringRecoveryError):
        c.send_rpc("", 8, 2, b"{}")
    assert c.state is State.RECOVERING

    assert feed(c, control(TakeBecomingPrimaryCheckpoint()), piece) == [
        (RecoveryComplete(3), LIVE),
        (CheckpointRequested(CheckpointReason.BECOMING_PRIMARY), LIVE),
    ]
    assert c.owes_checkpoint and not c.is_primary and not c.is_replaying
    # sent in pieces
    assert c.begin_checkpoint(5) == h("04 08 0a")
    assert c.checkpoint_data(b"ab") == b"ab"
    assert drain(c) == []  # not sent yet
    assert c.checkpoint_data(b"cde") == b"cde"
    assert drain(c) == [(BecamePrimary(recovered=True, checkpointed=True), PRIMARY)]

    assert feed(c, data(7, R4), piece) == [(IncomingRpc(R4, 7, False), PRIMARY)]
    assert c.send_rpc("svc", 5, 1, b"") == SVC_FORK_5  # attached once, in the earlier life
    assert c.send_rpc("", 8, 1, b"{}") == SELF_FORK_8
    assert c.messages_replayed == 3


@PIECES
def test_active_active_recovery(piece: int) -> None:
    c = BindingConnection("me")
    stream = checkpoint(BLOB) + data(0, InitialMessage(b"hi"), R1) + control(BecomingPrimary())
    stream += data(1, R2)
    assert feed(c, stream, piece) == [
        *loaded(),
        (InitialMessageReceived(b"hi", 0, True), REPLAY),
        (IncomingRpc(R1, 0, True), REPLAY),
        (RecoveryComplete(2), PRIMARY),
        (BecamePrimary(recovered=True, checkpointed=False), PRIMARY),
        (IncomingRpc(R2, 1, False), PRIMARY),
    ]
    assert c.state is State.PRIMARY and not c.owes_checkpoint


@PIECES
def test_active_active_primary_with_nothing_to_replay(piece: int) -> None:
    c = BindingConnection("me")
    assert feed(c, checkpoint(b"") + control(BecomingPrimary()), piece) == [
        (CheckpointLoadStarted(0), REPLAY),
        (CheckpointLoaded(0), REPLAY),
        (RecoveryComplete(0), PRIMARY),
        (BecamePrimary(recovered=True, checkpointed=False), PRIMARY),
    ]


@PIECES
def test_checkpointing_secondary_stays_replaying(piece: int) -> None:
    c = BindingConnection("me")
    stream = checkpoint(BLOB) + data(3, R1) + control(TakeCheckpoint()) + data(4, R2)
    assert feed(c, stream, piece) == [
        *loaded(),
        (IncomingRpc(R1, 3, True), REPLAY),
        (CheckpointRequested(CheckpointReason.PERIODIC), REPLAY),
    ]
    assert c.state is State.SECONDARY_CHECKPOINT and c.owes_checkpoint
    assert c.send_checkpoint(b"xy") == h("04 08 04 7879")
    assert drain(c) == [(IncomingRpc(R2, 4, True), REPLAY)]
    assert c.state is State.RECOVERING
    # and again, straight after the load
    c2 = BindingConnection("me")
    assert feed(c2, checkpoint(BLOB) + control(TakeCheckpoint()), piece)[-1] == (
        CheckpointRequested(CheckpointReason.PERIODIC),
        REPLAY,
    )


@PIECES
def test_live_upgrade(piece: int) -> None:
    c = BindingConnection("me")
    stream = checkpoint(BLOB) + data(9, R1) + control(UpgradeTakeCheckpoint()) + data(10, R2)
    assert feed(c, stream, piece) == [
        *loaded(),
        (IncomingRpc(R1, 9, True), REPLAY),
        (UpgradeRequested(live=True), LIVE),
        (RecoveryComplete(1), LIVE),
        (CheckpointRequested(CheckpointReason.UPGRADE), LIVE),
    ]
    assert c.upgraded and c.state is State.UPGRADE_CHECKPOINT
    assert c.send_checkpoint(b"v2") == h("04 08 04 7632")
    assert drain(c) == [
        (BecamePrimary(recovered=True, checkpointed=True), PRIMARY),
        (IncomingRpc(R2, 10, False), PRIMARY),
    ]


@PIECES
def test_repro_test_replays_and_never_becomes_primary(piece: int) -> None:
    c = BindingConnection("me")
    stream = checkpoint(BLOB) + data(0, InitialMessage(b"hi")) + data(1, R1) + data(2, R4)
    assert feed(c, stream, piece) == [
        *loaded(),
        (InitialMessageReceived(b"hi", 0, True), REPLAY),
        (IncomingRpc(R1, 1, True), REPLAY),
        (IncomingRpc(R4, 2, True), REPLAY),
    ]
    assert c.state is State.RECOVERING and not c.upgraded and c.messages_replayed == 3


@PIECES
def test_upgrade_test_switches_then_replays(piece: int) -> None:
    c = BindingConnection("me")
    stream = checkpoint(BLOB) + control(UpgradeService()) + data(4, R1) + data(5, R2)
    assert feed(c, stream, piece) == [
        *loaded(),
        (UpgradeRequested(live=False), REPLAY),
        (IncomingRpc(R1, 4, True), REPLAY),
        (IncomingRpc(R2, 5, True), REPLAY),
    ]
    assert c.upgraded and c.state is State.RECOVERING and not c.is_primary


@PIECES
def test_batches_are_expanded_in_order(piece: int) -> None:
    c = BindingConnection("me")
    feed(c, control(TakeBecomingPrimaryCheckpoint()), piece)
    c.send_initial_message(b"")
    assert drain(c) == [(CheckpointRequested(CheckpointReason.FIRST_START), LIVE)]
    c.send_checkpoint(b"")
    assert drain(c) == [(BecamePrimary(recovered=False, checkpointed=True), PRIMARY)]
    stream = data(0, InitialMessage(b""), RpcBatch((R1, R2, R3)))
    stream += data(1, CountReplayableRpcBatch((R4, R1, R2), 2), R3, RpcBatch(()))
    stream += data(2, RpcBatch((R4,)))
    assert feed(c, stream, piece) == [
        (InitialMessageReceived(b"", 0, False), PRIMARY),
        (IncomingRpc(R1, 0, False), PRIMARY),
        (IncomingRpc(R2, 0, False), PRIMARY),
        (IncomingRpc(R3, 0, False), PRIMARY),
        (IncomingRpc(R4, 1, False), PRIMARY),
        (IncomingRpc(R1, 1, False), PRIMARY),
        (IncomingRpc(R2, 1, False), PRIMARY),
        (IncomingRpc(R3, 1, False), PRIMARY),
        (IncomingRpc(R4, 2, False), PRIMARY),
    ]


def test_checkpoint_chunks_follow_the_input_exactly() -> None:
    c = BindingConnection("me")
    c.receive_data(checkpoint(BLOB)[:-10])
    got = drain(c)
    c.receive_data(BLOB[-10:-4])
    got += drain(c)
    c.receive_data(BLOB[-4:] + data(0, R1))
    got += drain(c)
    assert [e for e, _ in got] == [
        CheckpointLoadStarted(16),
        CheckpointLoadChunk(BLOB[:6]),
        CheckpointLoadChunk(BLOB[6:12]),
        CheckpointLoadChunk(BLOB[12:]),
        CheckpointLoaded(16),
        IncomingRpc(R1, 0, True),
    ]
