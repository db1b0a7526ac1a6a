"""The RPC encoders: the hot path of every outgoing call, so small method ids take a shortcut.

``encode_rpc`` writes the incoming form (what a binding receives); ``encode_outgoing_rpc``
the outgoing form (what a binding sends: the destination first). Both raise ``EncodeError``
for values the wire cannot carry.
"""

from __future__ import annotations

from ..errors import EncodeError
from .kinds import MessageType, RpcType
from .varint import encode_zz32

__all__ = ["encode_outgoing_rpc", "encode_rpc", "outgoing_rpc_head", "sized"]


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


def outgoing_rpc_head(destination: str, method_id: int, rpc_type: int) -> bytes:
    """What an outgoing-form RPC (reserved byte 0) holds between its size and its
    arguments: ``sized(head + args)`` is ``encode_outgoing_rpc(destination, method_id,
    rpc_type, args)``. A sender of many calls to one method encodes this once."""
    if rpc_type not in (0, 1, 2):
        raise EncodeError(f"RPC type must be 0, 1 or 2, got {rpc_type}")
    name = destination.encode("utf-8")
    return (_RPC_BYTE + encode_zz32(len(name)) + name + b"\x00" + encode_zz32(method_id)
            + _RPC_TYPE_BYTE[rpc_type])


def sized(message: bytes) -> bytes:
    """A message (type byte and data) behind its ZigZagInt size."""
    n = len(message)
    if n < 64:
        return bytes((n << 1,)) + message
    if n < 8192:
        return bytes((((n << 1) & 0x7F) | 0x80, n >> 6)) + message
    return encode_zz32(n) + message
