"""AMBROSIA messages: ``[ZigZagInt size][type byte][data]``, where size counts type and data.

Messages are small immutable tuples (``typing.NamedTuple``): cheap to build on the hot
path, hashable, and easy to pattern-match; equality sees the type (``_typed``), so
``TakeCheckpoint() != BecomingPrimary()`` although both hold no fields. Decoding
validates every field; encoding validates what it is given and raises ``EncodeError``
for values the wire cannot carry.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from ..errors import (
    EncodeError,
    IllegalDirectionError,
    UnknownMessageTypeError,
    VarintError,
    WireFormatError,
)
from ._typed import typed_equality
from .varint import (
    Incomplete,
    decode_zz32,
    decode_zz64,
    encode_zz32,
    encode_zz64,
)

__all__ = [
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
]


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


def _frame(mtype: int, data: bytes) -> bytes:
    return encode_zz32(len(data) + 1) + bytes((mtype,)) + data


# ZigZag(1) is 2, so a message with no data is [0x02][type].
_EMPTY = {t: bytes((2, t)) for t in range(16)}


def encode_rpc(method_id: int, rpc_type: int, args: bytes, reserved: int = 0) -> bytes:
    """An incoming-form RPC message, ``[size][0x00][reserved][zz32 method][type][args]``."""
    if not reserved and -64 <= method_id < 64 and 0 <= rpc_type <= 2:
        # Hot path: a one-byte method id; ZigZag of a small int needs no mask.
        n = len(args) + 4
        zz = (method_id << 1) ^ (method_id >> 31)
        if n < 64:
            return bytes((n << 1, 0, 0, zz, rpc_type)) + args
        return encode_zz32(n) + bytes((0, 0, zz, rpc_type)) + args
    if reserved:
        if not 0 < reserved < 256:
            raise EncodeError(f"reserved byte must be 0..255, got {reserved}")
        data = bytes((reserved,)) + args
    else:
        if rpc_type not in (0, 1, 2):
            raise EncodeError(f"RPC type must be 0, 1 or 2, got {rpc_type}")
        data = b"\x00" + encode_zz32(method_id) + _RPC_TYPE_BYTE[rpc_type] + args
    return encode_zz32(len(data) + 1) + _RPC_BYTE + data


_RPC_TYPE_BYTE = tuple(bytes((t,)) for t in RpcType)  # indexed by the RPC type
_RPC_BYTE = bytes((MessageType.RPC,))


def encode_outgoing_rpc(
    destination: str, method_id: int, rpc_type: int, args: bytes, reserved: int = 0
) -> bytes:
    """An outgoing-form RPC: ``[size][0x00][zz32 len][dest][reserved][zz32 method][type][args]``.

    An empty destination is a self-call: its length is 0 and the name is omitted.
    """
    if not reserved and -64 <= method_id < 64 and 0 <= rpc_type <= 2:
        zz = (method_id << 1) ^ (method_id >> 31)
        if not destination:
            n = len(args) + 5
            if n < 64:
                return bytes((n << 1, 0, 0, 0, zz, rpc_type)) + args
            return encode_zz32(n) + bytes((0, 0, 0, zz, rpc_type)) + args
        name = destination.encode("utf-8")
        if len(name) < 64:
            n = len(name) + len(args) + 5
            tail = bytes((0, zz, rpc_type))
            if n < 64:
                return bytes((n << 1, 0, len(name) << 1)) + name + tail + args
            return encode_zz32(n) + bytes((0, len(name) << 1)) + name + tail + args
    name = destination.encode("utf-8")
    if reserved:
        if not 0 < reserved < 256:
            raise EncodeError(f"reserved byte must be 0..255, got {reserved}")
        data = encode_zz32(len(name)) + name + bytes((reserved,)) + args
    else:
        if rpc_type not in (0, 1, 2):
            raise EncodeError(f"RPC type must be 0, 1 or 2, got {rpc_type}")
        data = (
            encode_zz32(len(name)) + name + b"\x00" + encode_zz32(method_id)
            + _RPC_TYPE_BYTE[rpc_type] + args
        )
    return encode_zz32(len(data) + 1) + _RPC_BYTE + data


def encode_message(msg: Message) -> bytes:
    """Encode any message, size prefix included."""
    return msg.encode()


# ---------------------------------------------------------------- decoding


def _decode_rpc_body(
    buf: bytes, start: int, end: int, outgoing: bool, base: int
) -> Rpc | OutgoingRpc:
    pos = start
    dest = ""
    if outgoing:
        try:
            n, pos = decode_zz32(buf, pos)
        except Incomplete:
            raise WireFormatError(
                "RPC ends inside its destination length", offset=base + pos, message_type=_T.RPC
            ) from None
        if n < 0 or pos + n > end:
            raise WireFormatError(
                f"RPC destination length {n} does not fit the message",
                offset=base + pos,
                message_type=_T.RPC,
            )
        try:
            dest = buf[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise WireFormatError(
                "RPC destination is not UTF-8", offset=base + pos, message_type=_T.RPC
            ) from None
        pos += n
    if pos >= end:
        raise WireFormatError("RPC has no reserved byte", offset=base + pos, message_type=_T.RPC)
    reserved = buf[pos]
    pos += 1
    if reserved:
        args = buf[pos:end]
        if outgoing:
            return OutgoingRpc(dest, 0, 0, args, reserved)
        return Rpc(0, 0, args, reserved)
    try:
        method_id, pos = decode_zz32(buf, pos)
    except Incomplete:
        raise WireFormatError(
            "RPC ends inside its method id", offset=base + pos, message_type=_T.RPC
        ) from None
    if pos > end - 1:
        raise WireFormatError("RPC has no RPC type byte", offset=base + pos, message_type=_T.RPC)
    rpc_type = buf[pos]
    if rpc_type > 2:
        raise WireFormatError(
            f"unknown RPC type {rpc_type} (expected 0 async, 1 fork, 2 impulse)",
            offset=base + pos,
            message_type=_T.RPC,
        )
    args = buf[pos + 1 : end]
    if outgoing:
        return OutgoingRpc(dest, method_id, rpc_type, args, 0)
    return Rpc(method_id, rpc_type, args, 0)


def _expect_empty(mtype: int, start: int, end: int, base: int) -> None:
    if end != start:
        raise WireFormatError(
            f"{MessageType(mtype).name} carries no data but has {end - start} bytes",
            offset=base + start,
            message_type=mtype,
        )


def _decode_batch(
    buf: bytes, start: int, end: int, direction: Direction, base: int, counted: bool
) -> RpcBatch | CountReplayableRpcBatch:
    mtype = _T.COUNT_REPLAYABLE_RPC_BATCH if counted else _T.RPC_BATCH
    try:
        count, pos = decode_zz32(buf, start)
        replayable = 0
        if counted:
            replayable, pos = decode_zz32(buf, pos)
    except Incomplete:
        raise WireFormatError(
            "batch ends inside its count", offset=base + start, message_type=mtype
        ) from None
    if pos > end:
        raise WireFormatError("batch count overruns the message", offset=base + start,
                              message_type=mtype)
    if count < 0 or count > end - pos:
        raise WireFormatError(
            f"batch count {count} is impossible for {end - pos} bytes",
            offset=base + start,
            message_type=mtype,
        )
    if counted and not 0 <= replayable <= count:
        raise WireFormatError(
            f"replayable count {replayable} is outside 0..{count}",
            offset=base + start,
            message_type=mtype,
        )
    outgoing = direction is Direction.TO_COORDINATOR
    rpcs: list[Rpc | OutgoingRpc] = []
    for _ in range(count):
        try:
            size, body = decode_zz32(buf, pos)
        except Incomplete:
            raise WireFormatError(
                "batch ends inside an RPC's size", offset=base + pos, message_type=mtype
            ) from None
        msg_end = body + size
        if size < 1 or msg_end > end:
            raise WireFormatError(
                f"batched message size {size} does not fit the batch",
                offset=base + pos,
                message_type=mtype,
            )
        if buf[body] != 0:
            raise WireFormatError(
                f"a batch holds only RPCs, found message type {buf[body]}",
                offset=base + body,
                message_type=mtype,
            )
        rpcs.append(_decode_rpc_body(buf, body + 1, msg_end, outgoing, base))
        pos = msg_end
    if pos != end:
        raise WireFormatError(
            f"batch of {count} RPCs leaves {end - pos} stray bytes",
            offset=base + pos,
            message_type=mtype,
        )
    if counted:
        return CountReplayableRpcBatch(tuple(rpcs), replayable)
    return RpcBatch(tuple(rpcs))


_EMPTY_MESSAGES: dict[int, Message] = {
    _T.TAKE_CHECKPOINT: TakeCheckpoint(),
    _T.UPGRADE_TAKE_CHECKPOINT: UpgradeTakeCheckpoint(),
    _T.TAKE_BECOMING_PRIMARY_CHECKPOINT: TakeBecomingPrimaryCheckpoint(),
    _T.UPGRADE_SERVICE: UpgradeService(),
    _T.BECOMING_PRIMARY: BecomingPrimary(),
}


def decode_body(
    mtype: int, buf: bytes, start: int, end: int, direction: Direction, base: int = 0
) -> Message:
    """Decode the data of one message whose type byte is ``mtype`` and data is ``buf[start:end]``.

    ``base`` is added to positions in error messages (the buffer's offset in its stream).

    Raises:
        WireFormatError: (or a subclass) the data is malformed or illegal in ``direction``.
    """
    try:
        return _decode_body(mtype, buf, start, end, direction, base)
    except VarintError as err:
        raise rebased(err, base, mtype) from None


def rebased(err: VarintError, base: int, mtype: int | None = None) -> VarintError:
    # The varint decoders know only buffer positions; callers know the stream offset.
    offset = None if err.offset is None else err.offset + base
    return VarintError(err.reason, offset=offset, message_type=mtype)


def _decode_body(
    mtype: int, buf: bytes, start: int, end: int, direction: Direction, base: int
) -> Message:
    if mtype not in LEGAL_TYPES[direction]:
        if mtype in _KNOWN_TYPES:
            raise IllegalDirectionError(
                f"{MessageType(mtype).name} is not allowed {direction.value}",
                offset=base + start - 1,
                message_type=mtype,
            )
        raise UnknownMessageTypeError(
            f"unknown message type {mtype}", offset=base + start - 1, message_type=mtype
        )
    if mtype == _T.RPC:
        return _decode_rpc_body(buf, start, end, direction is Direction.TO_COORDINATOR, base)
    if mtype in _EMPTY_MESSAGES:
        _expect_empty(mtype, start, end, base)
        return _EMPTY_MESSAGES[mtype]
    if mtype == _T.RPC_BATCH or mtype == _T.COUNT_REPLAYABLE_RPC_BATCH:
        return _decode_batch(buf, start, end, direction, base,
                             mtype == _T.COUNT_REPLAYABLE_RPC_BATCH)
    if mtype == _T.CHECKPOINT or mtype == _T.TRIM_TO:
        try:
            value, pos = decode_zz64(buf, start)
        except Incomplete:
            raise WireFormatError(
                "message ends inside its ZigZagLong", offset=base + start, message_type=mtype
            ) from None
        if pos != end:
            raise WireFormatError(
                f"{MessageType(mtype).name} should hold one ZigZagLong, "
                f"found {end - pos} extra bytes",
                offset=base + pos,
                message_type=mtype,
            )
        if mtype == _T.CHECKPOINT:
            if value < 0:
                raise WireFormatError(
                    f"negative checkpoint size {value}", offset=base + start,
                    message_type=_T.CHECKPOINT,
                )
            return Checkpoint(value)
        return TrimTo(value)
    if mtype == _T.ATTACH_TO:
        try:
            return AttachTo(buf[start:end].decode("utf-8"))
        except UnicodeDecodeError:
            raise WireFormatError(
                "AttachTo destination is not UTF-8", offset=base + start, message_type=_T.ATTACH_TO
            ) from None
    # the only type left: INITIAL_MESSAGE
    return InitialMessage(buf[start:end])


_KNOWN_TYPES = frozenset(int(t) for t in MessageType)
