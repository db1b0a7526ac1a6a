"""The compiled fast paths (``_cfast``) against the pure ones (``_fast``) on the same inputs.

They must agree on everything: the events (equal with their types), where they stop, the
destination-name cache, and what they do with inputs they do not take. Neither raises,
so the typed errors, which come from the one general decoder once a fast path stops, are
the same too; the rest of ``tests/wire`` also runs once with ``AMBROSIA_PY_CODEC=pure``
(``make test``), so the decoders are tested on both paths. The comparisons here name both
paths, whatever the environment chose, so that run leaves them out.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ambrosia_core.errors import CodecChoiceError

# _cfast without importorskip: a missing build must fail here, never pass as the pure path.
from ambrosia_core.wire import (  # type: ignore[attr-defined]
    OutgoingRpc,
    _cfast,
    _fast,
    encode_outgoing_rpc,
    encode_record,
    encode_rpc,
    encode_zz32,
    fastpaths,
)
from ambrosia_core.wire.outgoing import OutgoingFrame
from tests import strategies as s

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


def records(impl: Any, buf: Any, pos: int, last: int | None, limit: int, verify: bool
            ) -> tuple[Any, ...]:
    out: list[Any] = []
    stop, seq = impl.incoming_records(buf, pos, last, limit, verify, out)
    return stop, seq, [(type(m), tuple(m)) for m in out]


def record_streams() -> st.SearchStrategy[bytes]:
    bodies = st.lists(st.builds(encode_rpc, s.method_ids, st.sampled_from([0, 1]),
                                st.binary(max_size=80)), min_size=1, max_size=3).map(b"".join)
    other = st.sampled_from([encode_rpc(0, 0, b"r", reserved=1), b"\x02\x02"])  # odd ones
    body = st.one_of(bodies, bodies, (st.tuples(bodies, other).map(b"".join)))
    return st.lists(st.tuples(body, st.sampled_from([0, 0, 0, 1, -1, -2])), max_size=6).map(
        lambda rs: b"".join(encode_record(1, 5 + i + skew, b) for i, (b, skew) in enumerate(rs)))


@SETTINGS
@given(st.one_of(record_streams(), record_streams().flatmap(s.mutations)),
       st.sampled_from([None, 4, 5, 9]), st.sampled_from([24, 100, 1 << 20]), st.booleans())
def test_incoming_records_agree_on_any_input(buf, last, limit, verify):
    for pos in (0, 1):
        assert records(_cfast, buf, pos, last, limit, verify) == \
            records(_fast, buf, pos, last, limit, verify)


def test_incoming_records_take_whole_records_of_calls_only():
    calls = encode_record(1, 0, encode_rpc(7, 1, b"a") + encode_rpc(0x2F3C4D5E, 1, b"b" * 200))
    result = encode_record(1, 1, encode_rpc(7, 1, b"c") + encode_rpc(0, 0, b"r", reserved=1))
    for impl in IMPLS.values():
        got = records(impl, calls + result, 0, None, 1 << 20, True)
        assert got[:2] == (len(calls), 0) and len(got[2]) == 2
        assert records(impl, calls, 0, 3, 1 << 20, True)[:2] == (0, 3)  # a gap: left alone
        damaged = calls[:-1] + bytes((calls[-1] ^ 1,))
        assert records(impl, damaged, 0, None, 1 << 20, True)[:2] == (0, None)
        assert records(impl, damaged, 0, None, 1 << 20, False)[:2] == (len(calls), 0)


def choose(choice: str) -> tuple[str, Any]:
    return fastpaths.choose_fast_paths(_fast, lambda: _cfast, fastpaths._FUNCTIONS,
                                       choice=choice)


def test_the_decoders_use_the_codec_the_environment_chose():
    assert fastpaths.CODEC in IMPLS
    assert fastpaths.outgoing_rpcs is IMPLS[fastpaths.CODEC].outgoing_rpcs


def test_without_a_choice_given_the_environment_chooses(monkeypatch):
    monkeypatch.setenv("AMBROSIA_PY_CODEC", "pure")
    assert fastpaths.choose_fast_paths(_fast, lambda: _cfast, ()) == ("pure", _fast)
    monkeypatch.delenv("AMBROSIA_PY_CODEC")  # auto: compiled when built
    assert fastpaths.choose_fast_paths(_fast, lambda: _cfast, ()) == ("compiled", _cfast)


def test_a_codec_choice_that_cannot_be_met_is_a_typed_error():
    assert choose("pure") == ("pure", _fast)
    assert choose("compiled") == ("compiled", _cfast)
    with pytest.raises(CodecChoiceError, match="expected auto, pure or compiled"):
        choose("fast")


def frames(impl: Any, buf: Any, pos: int, stop: int, limit: int) -> tuple[Any, ...]:
    out: list[Any] = []
    names: dict[bytes, str] = {}
    at = impl.outgoing_frames(buf, pos, stop, limit, names, out)
    return at, [(type(f), tuple(f)) for f in out], names


# Sizes of one, two and three bytes: the compiled loop writes the incoming form's size.
BIG_OUTGOING = [encode_outgoing_rpc("peer", 9, 2, b"i" * n) for n in (50, 58, 8180, 8200)]


@pytest.mark.parametrize("buf", GOLDEN_OUTGOING + BIG_OUTGOING)
@pytest.mark.parametrize("limit", [64, 1 << 16, 1 << 20])
def test_outgoing_frames_agree_on_golden_inputs(buf, limit):
    for pos in range(min(len(buf), 4) + 1):
        for short in (0, 1, 7):
            stop = max(pos, len(buf) - short)
            assert frames(_cfast, buf, pos, stop, limit) == frames(_fast, buf, pos, stop, limit)


@SETTINGS
@given(damaged(to_coordinator_bodies), st.integers(0, 3), st.integers(0, 3),
       st.integers(1, 1 << 20))
def test_outgoing_frames_agree_on_any_input(buf, pos, short, limit):
    stop = max(0, len(buf) - short)
    assert frames(_cfast, buf, pos, stop, limit) == frames(_fast, buf, pos, stop, limit)


def test_outgoing_frames_turn_each_call_into_its_incoming_form():
    rpcs = [OutgoingRpc("peer", 9, 1, b"a" * n) for n in (0, 55, 70, 9000)]
    rpcs += [OutgoingRpc("", -5, 2, b"i"), OutgoingRpc("", 0, 0, b"r", 1)]
    buf = b"".join(r.encode() for r in rpcs)
    for impl in IMPLS.values():
        out: list[Any] = []
        assert impl.outgoing_frames(buf, 0, len(buf), 1 << 20, {}, out) == len(buf)
        assert out == [OutgoingFrame(r.destination, r.incoming().encode(), r.encode(),
                                     r.rpc_type == 2 and r.reserved == 0) for r in rpcs]


@pytest.mark.parametrize("buf", GOLDEN_INCOMING)
def test_incoming_frame_count_agrees_on_golden_inputs(buf):
    for pos in range(min(len(buf), 4) + 1):
        for end in range(pos, len(buf) + 1):
            assert _cfast.incoming_frame_count(buf, pos, end) == \
                _fast.incoming_frame_count(buf, pos, end)


@SETTINGS
@given(damaged(to_binding_bodies), st.integers(0, 3), st.integers(0, 3))
def test_incoming_frame_count_agrees_on_any_input(buf, skip, short):
    end = max(0, len(buf) - short)
    pos = min(skip, end)
    assert _cfast.incoming_frame_count(buf, pos, end) == _fast.incoming_frame_count(buf, pos, end)
    assert _cfast.incoming_frame_count(bytearray(buf), pos, end) == \
        _fast.incoming_frame_count(buf, pos, end)


def test_a_build_from_an_older_codec_is_not_taken_for_a_current_one(monkeypatch):
    monkeypatch.delattr(_cfast, "outgoing_frames")  # as a build from before it existed
    with pytest.raises(CodecChoiceError, match="out of date, it lacks outgoing_frames"):
        choose("compiled")
    assert choose("auto") == ("pure", _fast)
