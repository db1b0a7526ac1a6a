"""ZigZag varints (protobuf-compatible) and fixed integers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import EncodeError, RemoteProtocolError, VarintError
from ambrosia_core.wire import (
    decode_zz32,
    decode_zz64,
    encode_zz32,
    encode_zz64,
    pack_int32,
    pack_int64,
    unpack_int32,
    unpack_int64,
)
from ambrosia_core.wire.varint import Incomplete, zz32_size

from .helpers import h

# (value, zigzag mapping, protobuf sint bytes)
ZZ32_TABLE = [
    (0, 0, "00"),
    (-1, 1, "01"),
    (1, 2, "02"),
    (-2, 3, "03"),
    (2, 4, "04"),
    (63, 126, "7E"),
    (-64, 127, "7F"),
    (64, 128, "80 01"),
    (300, 600, "D8 04"),
    (2**31 - 1, 2**32 - 2, "FE FF FF FF 0F"),
    (-(2**31), 2**32 - 1, "FF FF FF FF 0F"),
]
ZZ64_TABLE = [
    *ZZ32_TABLE,
    (2**31, 2**32, "80 80 80 80 10"),
    (190, 380, "FC 02"),
    (2**63 - 1, 2**64 - 2, "FE FF FF FF FF FF FF FF FF 01"),
    (-(2**63), 2**64 - 1, "FF FF FF FF FF FF FF FF FF 01"),
]


def _zigzag(n: int) -> int:
    # Written from the definition: non-negatives to evens, negatives to odds.
    return 2 * n if n >= 0 else -2 * n - 1


@pytest.mark.parametrize(("value", "mapped", "hexbytes"), ZZ32_TABLE)
def test_zz32_table(value, mapped, hexbytes):
    assert _zigzag(value) == mapped
    assert encode_zz32(value) == h(hexbytes)
    assert decode_zz32(h(hexbytes) + b"\xaa", 0) == (value, len(h(hexbytes)))
    assert zz32_size(value) == len(h(hexbytes))


@pytest.mark.parametrize(("value", "mapped", "hexbytes"), ZZ64_TABLE)
def test_zz64_table(value, mapped, hexbytes):
    assert _zigzag(value) == mapped
    assert encode_zz64(value) == h(hexbytes)
    assert decode_zz64(b"\x55" + h(hexbytes), 1) == (value, 1 + len(h(hexbytes)))


def _protobuf_varint(u: int) -> bytes:
    # Base-128, least significant group first, high bit = "more follows".
    out = []
    while True:
        group, u = u % 128, u // 128
        out.append(group + (128 if u else 0))
        if not u:
            return bytes(out)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1))
def test_zz32_matches_protobuf(n):
    data = encode_zz32(n)
    assert data == _protobuf_varint(_zigzag(n))
    assert decode_zz32(data) == (n, len(data))
    assert zz32_size(n) == len(data)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_zz64_matches_protobuf(n):
    data = encode_zz64(n)
    assert data == _protobuf_varint(_zigzag(n))
    assert decode_zz64(data) == (n, len(data))


@pytest.mark.parametrize("n", [2**31, -(2**31) - 1, 2**40])
def test_zz32_encode_overflow(n):
    with pytest.raises(EncodeError):
        encode_zz32(n)


@pytest.mark.parametrize("n", [2**63, -(2**63) - 1])
def test_zz64_encode_overflow(n):
    with pytest.raises(EncodeError):
        encode_zz64(n)


@pytest.mark.parametrize(
    ("decode", "hexbytes", "why"),
    [
        (decode_zz32, "80 00", "not minimally encoded"),
        (decode_zz32, "81 80 00", "not minimally encoded"),
        (decode_zz32, "80 80 80 80 00", "not minimally encoded"),
        (decode_zz32, "FF FF FF FF 10", "overflows"),  # bit 32 set
        (decode_zz32, "FF FF FF FF 7F", "overflows"),
        (decode_zz32, "80 80 80 80 80 01", "longer than 5"),  # 6 bytes
        (decode_zz64, "80 00", "not minimally encoded"),
        (decode_zz64, "FF FF FF FF FF FF FF FF FF 02", "overflows"),  # bit 64 set
        (decode_zz64, "80 80 80 80 80 80 80 80 80 80 01", "longer than 10"),  # 11 bytes
        (decode_zz64, "80 80 80 80 80 80 80 80 80 00", "not minimally encoded"),
    ],
)
def test_bad_varints_rejected(decode, hexbytes, why):
    data = b"\x00\x00" + h(hexbytes)
    with pytest.raises(VarintError, match=why) as info:
        decode(data, 2)
    assert isinstance(info.value, RemoteProtocolError)
    assert info.value.offset == 2


@pytest.mark.parametrize(
    ("decode", "hexbytes"),
    [
        (decode_zz32, ""),
        (decode_zz32, "80"),
        (decode_zz32, "FF FF FF FF"),
        (decode_zz64, "80 80 80 80 80 80 80 80 80"),
    ],
)
def test_truncated_varint_is_incomplete(decode, hexbytes):
    with pytest.raises(Incomplete):
        decode(h(hexbytes), 0)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.data())
def test_every_truncation_is_incomplete(n, data):
    encoded = encode_zz64(n)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(Incomplete):
        decode_zz64(encoded[:cut])


def test_fixed_integers():
    assert pack_int32(-2) == h("FE FF FF FF")
    assert pack_int64(0x0102030405060708) == h("08 07 06 05 04 03 02 01")
    assert unpack_int32(h("00 0D 0C 0B 0A"), 1) == 0x0A0B0C0D
    assert unpack_int64(h("FF FF FF FF FF FF FF FF")) == -1
    with pytest.raises(Incomplete):
        unpack_int32(b"\x00\x00\x00")
    with pytest.raises(Incomplete):
        unpack_int64(b"\x00" * 8, 1)
