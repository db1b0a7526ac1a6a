"""The wire's enums: the message type byte, the RPC type byte, and the stream directions.

``LEGAL_TYPES`` says which message types each direction may carry; the decoder refuses the
rest with ``IllegalDirectionError``.
"""

from __future__ import annotations

import enum

__all__ = ["LEGAL_TYPES", "Direction", "MessageType", "RpcType"]


class MessageType(enum.IntEnum):
    """The type byte. Direction: LB = language binding, IC = immortal coordinator."""

    RPC = 0  # LB->IC (outgoing form, destination first) and IC->LB (incoming form)
    ATTACH_TO = 1  # LB->IC
    TAKE_CHECKPOINT = 2  # both: IC asks for a checkpoint; LB asks the IC to ask now
    RPC_BATCH = 5  # both
    CHECKPOINT = 8  # both: zz64 size, then that many raw bytes outside the message
    INITIAL_MESSAGE = 9  # LB->IC, echoed IC->LB as the first data record
    UPGRADE_TAKE_CHECKPOINT = 10  # IC->LB
    TAKE_BECOMING_PRIMARY_CHECKPOINT = 11  # IC->LB
    UPGRADE_SERVICE = 12  # IC->LB
    COUNT_REPLAYABLE_RPC_BATCH = 13  # IC->LB
    TRIM_TO = 14  # IC->IC only
    BECOMING_PRIMARY = 15  # IC->LB


class RpcType(enum.IntEnum):
    """The byte after an RPC's method id."""

    ASYNC = 0  # async/await: the caller expects a result
    FORK = 1  # fire and forget
    IMPULSE = 2  # an input from the outside world; legal only when primary


class Direction(enum.Enum):
    """Which way a stream flows; it decides the RPC form and which types are legal."""

    TO_BINDING = "coordinator -> binding"
    TO_COORDINATOR = "binding -> coordinator"
    LINK = "coordinator -> coordinator"


# Which types each direction may carry.
_T = MessageType
LEGAL_TYPES: dict[Direction, frozenset[MessageType]] = {
    Direction.TO_BINDING: frozenset({
        _T.RPC, _T.TAKE_CHECKPOINT, _T.RPC_BATCH, _T.CHECKPOINT, _T.INITIAL_MESSAGE,
        _T.UPGRADE_TAKE_CHECKPOINT, _T.TAKE_BECOMING_PRIMARY_CHECKPOINT, _T.UPGRADE_SERVICE,
        _T.COUNT_REPLAYABLE_RPC_BATCH, _T.BECOMING_PRIMARY,
    }),
    Direction.TO_COORDINATOR: frozenset({
        _T.RPC, _T.ATTACH_TO, _T.TAKE_CHECKPOINT, _T.RPC_BATCH, _T.CHECKPOINT,
        _T.INITIAL_MESSAGE,
    }),
    Direction.LINK: frozenset({_T.RPC, _T.RPC_BATCH, _T.COUNT_REPLAYABLE_RPC_BATCH, _T.TRIM_TO}),
}
