"""The general decoder: the data of one message, whatever its type, validated field by field.

The hand-unrolled fast paths (``_fast``) cover the common RPC shapes; everything else, and
every error, comes through ``decode_body``.
"""

from __future__ import annotations

from ..errors import (
    IllegalDirectionError,
    UnknownMessageTypeError,
    VarintError,
    WireFormatError,
)
from .kinds import LEGAL_TYPES, Direction, MessageType
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
)
from .varint import Incomplete, decode_zz32, decode_zz64

__all__ = ["decode_body", "rebased"]

_T = MessageType


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
