"""The binding's protocol state machine, sans-IO: bytes in, typed events out; intents in,
bytes out. See ``connection.BindingConnection`` and the transition table in ``_state``."""

from . import events
from ._state import CHECKPOINT_OWED, REPLAYING_STATES, TRANSITIONS, State, Trigger
from .connection import BindingConnection
from .events import (
    BecamePrimary,
    CheckpointLoadChunk,
    CheckpointLoaded,
    CheckpointLoadStarted,
    CheckpointReason,
    CheckpointRequested,
    FirstStart,
    IncomingRpc,
    InitialMessageReceived,
    ProtocolEvent,
    RecoveryComplete,
    UpgradeRequested,
)

__all__ = [
    "CHECKPOINT_OWED",
    "REPLAYING_STATES",
    "TRANSITIONS",
    "BecamePrimary",
    "BindingConnection",
    "CheckpointLoadChunk",
    "CheckpointLoadStarted",
    "CheckpointLoaded",
    "CheckpointReason",
    "CheckpointRequested",
    "FirstStart",
    "IncomingRpc",
    "InitialMessageReceived",
    "Trigger",
    "ProtocolEvent",
    "RecoveryComplete",
    "State",
    "UpgradeRequested",
    "events",
]
