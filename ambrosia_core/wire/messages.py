"""AMBROSIA messages: ``[ZigZagInt size][type byte][data]``, where size counts type and data.

One import for the whole message vocabulary. It lives in four rooms: ``kinds`` (the type
bytes and directions), ``message_classes`` (one class per message, each encoding itself),
``encoders`` (the RPC hot path) and ``decoder`` (the general decoder, validating every
field).
"""

from __future__ import annotations

from .decoder import decode_body, rebased
from .encoders import encode_outgoing_rpc, encode_rpc
from .kinds import LEGAL_TYPES, Direction, MessageType, RpcType
from .message_classes import (
    AttachTo,
    BecomingPrimary,
    Checkpoint,
    CountReplayableRpcBatch,
    InitialMessage,
    Message,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    TrimTo,
    UpgradeService,
    UpgradeTakeCheckpoint,
    encode_message,
    message_type_of,
)

__all__ = [
    "LEGAL_TYPES",
    "AttachTo",
    "BecomingPrimary",
    "Checkpoint",
    "CountReplayableRpcBatch",
    "Direction",
    "InitialMessage",
    "Message",
    "MessageType",
    "OutgoingRpc",
    "Rpc",
    "RpcBatch",
    "RpcType",
    "TakeBecomingPrimaryCheckpoint",
    "TakeCheckpoint",
    "TrimTo",
    "UpgradeService",
    "UpgradeTakeCheckpoint",
    "decode_body",
    "encode_message",
    "encode_outgoing_rpc",
    "encode_rpc",
    "message_type_of",
    "rebased",
]
