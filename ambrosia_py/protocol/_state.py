"""The binding's protocol states and the transition table that governs them.

The table is plain data: ``TRANSITIONS[state][input] -> next state``. A missing entry is a
protocol violation, raised by the connection with the state and input named. Inputs come
from two sides: what the coordinator sends (``Trigger.RECV_*``) and what the binding does
(``Trigger.SEND_*``, ``Trigger.CHECKPOINT_SENT``).
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    # Members compare by identity; Enum's own __hash__ (of the name, in Python) costs
    # more than the rest of a replayed record's state-table lookups.
    __hash__ = object.__hash__

    START = "waiting for the coordinator's first record"
    FIRST_START = "first start: the binding owes an InitialMessage"
    LOADING_CHECKPOINT = "receiving a checkpoint"
    CHECKPOINT_LOADED = "checkpoint loaded, no log record replayed yet"
    RECOVERING = "replaying the log"
    BECOMING_PRIMARY_CHECKPOINT = "becoming primary: the binding owes a checkpoint"
    UPGRADE_CHECKPOINT = "upgrading: the binding owes a checkpoint of the new version"
    SECONDARY_CHECKPOINT = "recovering: the binding owes a checkpoint"
    PRIMARY_CHECKPOINT = "primary: the binding owes a checkpoint"
    PRIMARY = "primary: normal processing"
    ERROR = "broken by a protocol error"


class Trigger(enum.Enum):
    """What moves the state machine: a message received or an act of the binding."""

    # Members compare by identity; Enum's own __hash__ (of the name, in Python) costs
    # more than the rest of a replayed record's state-table lookups.
    __hash__ = object.__hash__

    # From the coordinator
    RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT = "TakeBecomingPrimaryCheckpoint received"
    RECV_CHECKPOINT = "checkpoint record received"
    RECV_CHECKPOINT_END = "last checkpoint byte received"
    RECV_RPC = "RPC received"
    RECV_INITIAL_MESSAGE = "InitialMessage echo received"
    RECV_TAKE_CHECKPOINT = "TakeCheckpoint received"
    RECV_BECOMING_PRIMARY = "BecomingPrimary received"
    RECV_UPGRADE_TAKE_CHECKPOINT = "UpgradeTakeCheckpoint received"
    RECV_UPGRADE_SERVICE = "UpgradeService received"
    # From the binding
    SEND_INITIAL_MESSAGE = "send InitialMessage"
    CHECKPOINT_SENT = "last checkpoint byte sent"
    SEND_RPC = "send an RPC (async or fork)"
    SEND_IMPULSE = "send an Impulse"
    REQUEST_CHECKPOINT = "ask the coordinator for a checkpoint"


# Short aliases keep the table readable; deleted below so they are not exported.
S, I = State, Trigger  # noqa: E741

_REPLAYING = {
    I.RECV_RPC: S.RECOVERING,
    I.RECV_INITIAL_MESSAGE: S.RECOVERING,
    I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT: S.BECOMING_PRIMARY_CHECKPOINT,
    I.RECV_BECOMING_PRIMARY: S.PRIMARY,
    I.RECV_UPGRADE_TAKE_CHECKPOINT: S.UPGRADE_CHECKPOINT,
    I.RECV_TAKE_CHECKPOINT: S.SECONDARY_CHECKPOINT,
    # Replayed inputs still produce outputs; the coordinator needs them to regenerate
    # what it must resend and to drop what the receivers already have.
    I.SEND_RPC: S.RECOVERING,
}

TRANSITIONS: dict[State, dict[Trigger, State]] = {
    S.START: {
        I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT: S.FIRST_START,
        I.RECV_CHECKPOINT: S.LOADING_CHECKPOINT,
    },
    S.FIRST_START: {
        I.SEND_INITIAL_MESSAGE: S.BECOMING_PRIMARY_CHECKPOINT,
    },
    S.LOADING_CHECKPOINT: {
        I.RECV_CHECKPOINT_END: S.CHECKPOINT_LOADED,
    },
    S.CHECKPOINT_LOADED: {
        **_REPLAYING,
        I.SEND_RPC: S.CHECKPOINT_LOADED,
        # Upgrade test: the switch happens before any record is replayed.
        I.RECV_UPGRADE_SERVICE: S.RECOVERING,
    },
    S.RECOVERING: dict(_REPLAYING),
    S.BECOMING_PRIMARY_CHECKPOINT: {I.CHECKPOINT_SENT: S.PRIMARY},
    S.UPGRADE_CHECKPOINT: {I.CHECKPOINT_SENT: S.PRIMARY},
    S.SECONDARY_CHECKPOINT: {I.CHECKPOINT_SENT: S.RECOVERING},
    S.PRIMARY_CHECKPOINT: {I.CHECKPOINT_SENT: S.PRIMARY},
    S.PRIMARY: {
        I.RECV_RPC: S.PRIMARY,
        I.RECV_INITIAL_MESSAGE: S.PRIMARY,
        I.RECV_TAKE_CHECKPOINT: S.PRIMARY_CHECKPOINT,
        I.SEND_RPC: S.PRIMARY,
        I.SEND_IMPULSE: S.PRIMARY,
        I.REQUEST_CHECKPOINT: S.PRIMARY,
    },
    S.ERROR: {},
}

# States in which the binding owes the coordinator a checkpoint; nothing else is
# dispatched until it has been sent.
CHECKPOINT_OWED = frozenset(
    {
        S.BECOMING_PRIMARY_CHECKPOINT,
        S.UPGRADE_CHECKPOINT,
        S.SECONDARY_CHECKPOINT,
        S.PRIMARY_CHECKPOINT,
    }
)

REPLAYING_STATES = frozenset(
    {S.LOADING_CHECKPOINT, S.CHECKPOINT_LOADED, S.RECOVERING, S.SECONDARY_CHECKPOINT}
)

del S, I
