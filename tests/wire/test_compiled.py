"""The compiled fast paths (``_cfast``) against the pure ones (``_fast``) on the same inputs.

They must agree on everything: the events (equal with their types), where they stop, the
destination-name cache, and what they do with inputs they do not take. Neither raises,
so the typed errors, which come from the one general decoder once a fast path stops, are
the same too; the whole of ``tests/wire`` also runs once with ``AMBROSIA_PY_CODEC=pure``
(``make test``), so the decoders are tested on both paths.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ambrosia_py.errors import CodecChoiceError

# _cfast without importorskip: a missing build must fail here, never pass as the pure path.
from ambrosia_py.wire import (  # type: ignore[attr-defined]
    _cfast,
    _fast,
    _paths,
    encode_outgoing_rpc,
    encode_rpc,
    encode_zz32,
)

from .test_fast_paths import (
    ODD_DETAILS,
    SETTINGS,
    _raw_frame,
    damaged,
    to_binding_bodies,
    to_coordinator_bodies,
)

IMPLS = {"pure": _fast, "compiled": _cfast}


def incoming(impl: Any, buf: Any, pos: int, end: int) -> tuple[int, list[Any]]:
    out: list[Any] = []
    stop = impl.incoming_rpcs(buf, pos, end, out.append)
    return stop, [(type(m), tuple(m)) for m in out]


def outgoing(impl: Any, buf: Any, pos: int, limit: int, once: bool) -> tuple[Any, ...]:
    out: list[Any] = []
    names: dict[bytes, str] = {}
    stop = impl.outgoing_rpcs(buf, pos, limit, names, out.append, once)
    return stop, [(type(m), tuple(m)) for m in out], names


GOLDEN_INCOMING = [
    encode_rpc(7, 1, b"ab") * 3,
    encode_rpc(0x2F3C4D5E, 1, b"a" * 200) * 2,
    encode_rpc(-64, 2, b"") + encode_rpc(63, 0, b"x" * 63) + encode_rpc(64, 0, b"y" * 70),
    encode_rpc(-(1 << 31), 1, b"min") + encode_rpc((1 << 31) - 1, 1, b"max"),
    encode_rpc(7, 1, b"ok") + encode_rpc(0, 0, b"result", reserved=1),
    encode_rpc(7, 1, b"a" * 100)[:-1],  # cut short
    b"\x80\x00" + b"\x00" * 10,  # a size that is not minimal
    b"\x04\x00\x00\x0e\x01",  # a size of 2: too small for an RPC
    b"",
    *(_raw_frame(b"\x00", *ODD_DETAILS[d], b"args") for d in ODD_DETAILS),
]
GOLDEN_OUTGOING = [
    encode_outgoing_rpc("", 7, 1, b"a self-call") * 3,
    encode_outgoing_rpc("peer", 300, 0, b"x") + encode_outgoing_rpc("", 1, 1, b"y"),
    encode_outgoing_rpc("peer", 0x2F3C4D5E, 0, b"a" * 200) * 2,
    encode_outgoing_rpc("é" * 31, 5, 2, b"z"),  # a 62-byte UTF-8 name
    encode_outgoing_rpc("n" * 64, 5, 2, b"z"),  # a name too long for the fast path
    encode_outgoing_rpc("", 7, 1, b"big" * 30_000),  # over the limit below
    encode_outgoing_rpc("", 7, 1, b"ok") + _raw_frame(b"\x00\x04\xff\xfe\x00\x0e\x01"),
    b"\x01\x00\x00\x00\x00\x0e\x01",  # a negative size
    *(_raw_frame(b"\x00", encode_zz32(len(name)), name, *ODD_DETAILS[d], b"a")
      for d in ODD_DETAILS for name in (b"", b"peer", b"\xff\xfe")),
]


@pytest.mark.parametrize("buf", GOLDEN_INCOMING)
def test_incoming_rpcs_agree_on_golden_inputs(buf):
    for pos in range(min(len(buf), 4) + 1):
        assert incoming(_cfast, buf, pos, len(buf)) == incoming(_fast, buf, pos, len(buf))


@pytest.mark.parametrize("buf", GOLDEN_OUTGOING)
@pytest.mark.parametrize("limit", [64, 1 << 16, 1 << 20])
def test_outgoing_rpcs_agree_on_golden_inputs(buf, limit):
    for once in (False, True):
        for pos in range(min(len(buf), 4) + 1):
            assert outgoing(_cfast, buf, pos, limit, once) == outgoing(_fast, buf, pos, limit, once)


@SETTINGS
@given(damaged(to_binding_bodies), st.integers(0, 3), st.integers(0, 3))
def test_incoming_rpcs_agree_on_any_input(buf, skip, short):
    end = max(0, len(buf) - short)
    pos = min(skip, end)
    assert incoming(_cfast, buf, pos, end) == incoming(_fast, buf, pos, end)


@SETTINGS
@given(damaged(to_coordinator_bodies), st.integers(0, 3), st.integers(1, 1 << 20),
       st.booleans())
def test_outgoing_rpcs_agree_on_any_input(buf, pos, limit, once):
    assert outgoing(_cfast, buf, pos, limit, once) == outgoing(_fast, buf, pos, limit, once)


@given(st.binary(min_size=1, max_size=8), st.integers(0, 8), st.integers(0, 3))
def test_long_zz32_agrees(data, end, pos):
    data = bytes((data[0] | 0x80,)) * (pos + 1) + data[1:]
    end = min(len(data), max(pos + 1, end))
    assert _cfast.long_zz32(data, pos, end) == _fast.long_zz32(data, pos, end)


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_buffers_other_than_bytes_get_the_same_answers(kind):
    buf = GOLDEN_INCOMING[0] + GOLDEN_INCOMING[4]
    assert incoming(_cfast, kind(buf), 0, len(buf)) == incoming(_fast, buf, 0, len(buf))
    out = GOLDEN_OUTGOING[0]
    assert outgoing(_cfast, kind(out), 0, 1 << 20, False) == \
        outgoing(_fast, kind(out), 0, 1 << 20, False)
    assert _cfast.long_zz32(kind(b"\x96\x01"), 0, 2) == (75, 2)


def test_the_decoders_use_the_codec_the_environment_chose():
    assert _paths.CODEC in IMPLS
    assert _paths.outgoing_rpcs is IMPLS[_paths.CODEC].outgoing_rpcs


def test_a_codec_choice_that_cannot_be_met_is_a_typed_error():
    assert _paths._choose("pure") == ("pure", _fast)
    assert _paths._choose("compiled") == ("compiled", _cfast)
    with pytest.raises(CodecChoiceError, match="expected auto, pure or compiled"):
        _paths._choose("fast")
