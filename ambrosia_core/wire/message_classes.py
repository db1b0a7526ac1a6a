"""The message classes: one small immutable tuple per message type, each able to encode itself.

Messages are ``typing.NamedTuple``: cheap to build on the hot path, hashable, and easy to
pattern-match; equality sees the type (``typed``), so ``TakeCheckpoint() !=
BecomingPrimary()`` although both hold no fields. Encoding validates what it is given and
raises ``EncodeError`` for values the wire cannot carry.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import EncodeError
from .encoders import encode_outgoing_rpc, encode_rpc
from .kinds import MessageType
from .typed import typed_equality
from .varint import encode_zz32, encode_zz64

__all__ = [
    "AttachTo",
    "BecomingPrimary",
    "Checkpoint",
    "CountReplayableRpcBatch",
    "InitialMessage",
    "Message",
    "OutgoingRpc",
    "Rpc",
    "RpcBatch",
    "TakeBecomingPrimaryCheckpoint",
    "TakeCheckpoint",
    "TrimTo",
    "UpgradeService",
    "UpgradeTakeCheckpoint",
    "encode_message",
    "message_type_of",
]


@typed_equality
class Rpc(NamedTuple):
    """An RPC in its incoming form (as a binding receives it).

    ``reserved`` is 0 for a call. A non-zero reserved byte marks a return value in the C#
    binding's convention; then ``args`` holds every byte after the reserved byte and
    ``method_id``/``rpc_type`` are 0.
    """

    method_id: int
    rpc_type: int
    args: bytes
    reserved: int = 0

    def encode(self) -> bytes:
        return encode_rpc(self.method_id, self.rpc_type, self.args, self.reserved)


@typed_equality
class OutgoingRpc(NamedTuple):
    """An RPC as a binding sends it: the destination name first ("" for a self-call)."""

    destination: str
    method_id: int
    rpc_type: int
    args: bytes
    reserved: int = 0

    def encode(self) -> bytes:
        return encode_outgoing_rpc(
            self.destination, self.method_id, self.rpc_type, self.args, self.reserved
        )

    def incoming(self) -> Rpc:
        """The same call in the form its destination receives."""
        return Rpc(self.method_id, self.rpc_type, self.args, self.reserved)


@typed_equality
class AttachTo(NamedTuple):
    destination: str

    def encode(self) -> bytes:
        return _frame(MessageType.ATTACH_TO, self.destination.encode("utf-8"))


@typed_equality
class TakeCheckpoint(NamedTuple):
    def encode(self) -> bytes:
        return _EMPTY[MessageType.TAKE_CHECKPOINT]


@typed_equality
class RpcBatch(NamedTuple):
    rpcs: tuple[Rpc | OutgoingRpc, ...]

    def encode(self) -> bytes:
        parts = [encode_zz32(len(self.rpcs))]
        parts.extend(r.encode() for r in self.rpcs)
        return _frame(MessageType.RPC_BATCH, b"".join(parts))


@typed_equality
class Checkpoint(NamedTuple):
    """Announces ``size`` raw checkpoint bytes that follow the message (or record)."""

    size: int

    def encode(self) -> bytes:
        if self.size < 0:
            raise EncodeError(f"checkpoint size must not be negative, got {self.size}")
        return _frame(MessageType.CHECKPOINT, encode_zz64(self.size))


@typed_equality
class InitialMessage(NamedTuple):
    data: bytes

    def encode(self) -> bytes:
        return _frame(MessageType.INITIAL_MESSAGE, self.data)


@typed_equality
class UpgradeTakeCheckpoint(NamedTuple):
    def encode(self) -> bytes:
        return _EMPTY[MessageType.UPGRADE_TAKE_CHECKPOINT]


@typed_equality
class TakeBecomingPrimaryCheckpoint(NamedTuple):
    def encode(self) -> bytes:
        return _EMPTY[MessageType.TAKE_BECOMING_PRIMARY_CHECKPOINT]


@typed_equality
class UpgradeService(NamedTuple):
    def encode(self) -> bytes:
        return _EMPTY[MessageType.UPGRADE_SERVICE]


@typed_equality
class CountReplayableRpcBatch(NamedTuple):
    rpcs: tuple[Rpc | OutgoingRpc, ...]
    replayable_count: int

    def encode(self) -> bytes:
        parts = [encode_zz32(len(self.rpcs)), encode_zz32(self.replayable_count)]
        parts.extend(r.encode() for r in self.rpcs)
        return _frame(MessageType.COUNT_REPLAYABLE_RPC_BATCH, b"".join(parts))


@typed_equality
class TrimTo(NamedTuple):
    """Coordinator-to-coordinator: the receiver has durably logged everything up to ``seq_id``."""

    seq_id: int

    def encode(self) -> bytes:
        return _frame(MessageType.TRIM_TO, encode_zz64(self.seq_id))


@typed_equality
class BecomingPrimary(NamedTuple):
    def encode(self) -> bytes:
        return _EMPTY[MessageType.BECOMING_PRIMARY]


Message = (
    Rpc
    | OutgoingRpc
    | AttachTo
    | TakeCheckpoint
    | RpcBatch
    | Checkpoint
    | InitialMessage
    | UpgradeTakeCheckpoint
    | TakeBecomingPrimaryCheckpoint
    | UpgradeService
    | CountReplayableRpcBatch
    | TrimTo
    | BecomingPrimary
)

_TYPE_BYTES = {
    Rpc: MessageType.RPC,
    OutgoingRpc: MessageType.RPC,
    AttachTo: MessageType.ATTACH_TO,
    TakeCheckpoint: MessageType.TAKE_CHECKPOINT,
    RpcBatch: MessageType.RPC_BATCH,
    Checkpoint: MessageType.CHECKPOINT,
    InitialMessage: MessageType.INITIAL_MESSAGE,
    UpgradeTakeCheckpoint: MessageType.UPGRADE_TAKE_CHECKPOINT,
    TakeBecomingPrimaryCheckpoint: MessageType.TAKE_BECOMING_PRIMARY_CHECKPOINT,
    UpgradeService: MessageType.UPGRADE_SERVICE,
    CountReplayableRpcBatch: MessageType.COUNT_REPLAYABLE_RPC_BATCH,
    TrimTo: MessageType.TRIM_TO,
    BecomingPrimary: MessageType.BECOMING_PRIMARY,
}


def message_type_of(msg: Message) -> MessageType:
    """The type byte a message is sent with."""
    return _TYPE_BYTES[type(msg)]


def _frame(mtype: int, data: bytes) -> bytes:
    return encode_zz32(len(data) + 1) + bytes((mtype,)) + data


# ZigZag(1) is 2, so a message with no data is [0x02][type].
_EMPTY = {t: bytes((2, t)) for t in range(16)}


def encode_message(msg: Message) -> bytes:
    """Encode any message, size prefix included."""
    return msg.encode()
