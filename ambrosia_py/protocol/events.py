"""Events the binding's state machine hands to the runtime, one at a time, in log order."""

from __future__ import annotations

import enum
from typing import NamedTuple

from ambrosia_core.wire import Rpc
from ambrosia_core.wire.typed import typed_equality


class CheckpointReason(enum.Enum):
    """Why the coordinator asked for a checkpoint."""

    FIRST_START = "first start (TakeBecomingPrimaryCheckpoint)"
    BECOMING_PRIMARY = "recovered and becoming primary (TakeBecomingPrimaryCheckpoint)"
    UPGRADE = "live upgrade (UpgradeTakeCheckpoint)"
    PERIODIC = "the coordinator's TakeCheckpoint"


@typed_equality
class FirstStart(NamedTuple):
    """The instance has never run: send an InitialMessage (``send_initial_message``).

    A ``CheckpointRequested(FIRST_START)`` for the initial state follows once it is sent.
    """


@typed_equality
class CheckpointLoadStarted(NamedTuple):
    """Recovery begins with a checkpoint of ``size`` bytes; chunks follow."""

    size: int


@typed_equality
class CheckpointLoadChunk(NamedTuple):
    """Some of the checkpoint's raw bytes, in order; how they are cut depends on the input."""

    data: bytes


@typed_equality
class CheckpointLoaded(NamedTuple):
    """The whole checkpoint has arrived; replayed records follow."""

    size: int


@typed_equality
class InitialMessageReceived(NamedTuple):
    """The coordinator's echo of the InitialMessage: the first data record (seq ``seq_id``)."""

    data: bytes
    seq_id: int
    is_replay: bool


@typed_equality
class IncomingRpc(NamedTuple):
    """An RPC from the log. ``is_replay`` is true while recovering (its effects on the
    outside world already happened in an earlier life)."""

    rpc: Rpc
    seq_id: int
    is_replay: bool


@typed_equality
class CheckpointRequested(NamedTuple):
    """The binding is asked for a checkpoint: send one now (``send_checkpoint``, or
    ``begin_checkpoint`` and chunks).

    Not the wire message ``TakeCheckpoint``: any of the coordinator's three requests
    (``reason``) and the first start end up as this event. Until it has been sent, no
    other event is delivered.
    """

    reason: CheckpointReason


@typed_equality
class UpgradeRequested(NamedTuple):
    """Switch code and state from VCurrent to VNext now.

    ``live`` is true for UpgradeTakeCheckpoint (a checkpoint of the new version is
    requested next) and false for UpgradeService (an upgrade test: replay goes on).
    """

    live: bool


@typed_equality
class BecamePrimary(NamedTuple):
    """The instance is primary: Impulses are legal and side effects may start.

    ``recovered`` is false on a first start; ``checkpointed`` tells whether a checkpoint
    was taken on the way (TakeBecomingPrimaryCheckpoint / UpgradeTakeCheckpoint) or not
    (BecomingPrimary, active/active).
    """

    recovered: bool
    checkpointed: bool


@typed_equality
class RecoveryComplete(NamedTuple):
    """Replay is over (delivered before ``BecamePrimary`` when recovering).

    ``messages_replayed`` counts the replayed messages (RPCs, batched ones one by one, and
    the InitialMessage echo) delivered since the checkpoint was loaded.
    """

    messages_replayed: int


ProtocolEvent = (
    FirstStart
    | CheckpointLoadStarted
    | CheckpointLoadChunk
    | CheckpointLoaded
    | InitialMessageReceived
    | IncomingRpc
    | CheckpointRequested
    | UpgradeRequested
    | BecamePrimary
    | RecoveryComplete
)
