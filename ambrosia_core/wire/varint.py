"""ZigZag varints (protobuf-compatible) and little-endian fixed integers.

Decoders take a buffer and a position and return ``(value, next_position)``. They are
strict: an encoding longer than the minimal one, or one that overflows its width, is a
``VarintError``; running off the end of the buffer raises ``Incomplete`` so that
incremental decoders can wait for more bytes.
"""

from __future__ import annotations

import struct

from ..errors import EncodeError, VarintError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "Incomplete",
    "decode_zz32",
    "decode_zz64",
    "encode_zz32",
    "encode_zz64",
    "pack_int32",
    "pack_int64",
    "unpack_int32",
    "unpack_int64",
    "zz32_size",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
pack_int32 = _I32.pack
pack_int64 = _I64.pack


class Incomplete(Exception):  # noqa: N818 - a signal, not an error: the buffer simply ends early
    """The buffer ended inside a field; feed more bytes and try again."""


def unpack_int32(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """IntFixed: a little-endian signed 32-bit integer at ``pos``."""
    if len(buf) - pos < 4:
        raise Incomplete
    return int(_I32.unpack_from(buf, pos)[0])


def unpack_int64(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """LongFixed: a little-endian signed 64-bit integer at ``pos``."""
    if len(buf) - pos < 8:
        raise Incomplete
    return int(_I64.unpack_from(buf, pos)[0])


# Small values dominate (sizes, method ids, counts); precomputing them avoids a loop.
_SMALL_ZZ = [bytes([((n << 1) ^ (n >> 31)) & 0xFFFFFFFF]) for n in range(0, 64)]
_SMALL_ZZ_NEG = [bytes([((n << 1) ^ (n >> 31)) & 0xFFFFFFFF]) for n in range(-64, 0)]


def _encode_unsigned(u: int) -> bytes:
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_zz32(n: int) -> bytes:
    """ZigZagInt: encode a signed 32-bit integer as a 1-5 byte varint."""
    if 0 <= n < 64:
        return _SMALL_ZZ[n]
    if 64 <= n < 8192:  # two bytes: most message sizes, without the general loop
        return bytes((((n << 1) & 0x7F) | 0x80, n >> 6))
    if -64 <= n < 0:
        return _SMALL_ZZ_NEG[n + 64]
    if not INT32_MIN <= n <= INT32_MAX:
        raise EncodeError(f"{n} does not fit a ZigZagInt (32-bit)")
    return _encode_unsigned(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def encode_zz64(n: int) -> bytes:
    """ZigZagLong: encode a signed 64-bit integer as a 1-10 byte varint."""
    if 0 <= n < 64:
        return _SMALL_ZZ[n]
    if -64 <= n < 0:
        return _SMALL_ZZ_NEG[n + 64]
    if not INT64_MIN <= n <= INT64_MAX:
        raise EncodeError(f"{n} does not fit a ZigZagLong (64-bit)")
    return _encode_unsigned(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def zz32_size(n: int) -> int:
    """Number of bytes ``encode_zz32(n)`` produces."""
    u = ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF
    size = 1
    while u > 0x7F:
        u >>= 7
        size += 1
    return size


def _decode_unsigned(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, last_max: int, what: str
) -> tuple[int, int]:
    end = len(buf)
    result = 0
    shift = 0
    start = pos
    for i in range(max_bytes):
        if pos >= end:
            raise Incomplete
        b = buf[pos]
        pos += 1
        if b < 0x80:
            if i == max_bytes - 1 and b > last_max:
                raise VarintError(f"{what} overflows its width", offset=start)
            if b == 0 and i > 0:
                raise VarintError(f"{what} is not minimally encoded", offset=start)
            return result | (b << shift), pos
        result |= (b & 0x7F) << shift
        shift += 7
    raise VarintError(f"{what} is longer than {max_bytes} bytes", offset=start)


def decode_zz32(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """ZigZagInt at ``pos``: returns ``(value, next_pos)``."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:  # one-byte fast path
            return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _decode_unsigned(buf, pos, 5, 0x0F, "ZigZagInt")
    return (u >> 1) ^ -(u & 1), pos


def decode_zz64(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """ZigZagLong at ``pos``: returns ``(value, next_pos)``."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _decode_unsigned(buf, pos, 10, 0x01, "ZigZagLong")
    return (u >> 1) ^ -(u & 1), pos
