"""The compiled fast paths (``_cfast``) against the pure ones (``_fast``) on the same inputs.

They must agree on everything: the events (equal with their types), where they stop, the
destination-name cache, and what they do with inputs they do not take. Neither raises,
so the typed errors, which come from the one general decoder once a fast path stops, are
the same too; the whole of ``tests/wire`` also runs once with ``AMBROSIA_PY_CODEC=pure``
(``make test``), so the decoders are tested on both paths.
"""

from __future__ import annotations

import mmap
import struct
from array import array
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
    _paths,
    encode_outgoing_rpc,
    encode_record,
    encode_rpc,
    encode_zz32,
)
from ambrosia_core.wire.outgoing import OutgoingFrame
from ambrosia_core.wire.records import HEADER, check_bytes
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


def test_the_decoders_use_the_codec_the_environment_chose():
    assert _paths.CODEC in IMPLS
    assert _paths.outgoing_rpcs is IMPLS[_paths.CODEC].outgoing_rpcs


def test_a_codec_choice_that_cannot_be_met_is_a_typed_error():
    assert _paths._choose("pure") == ("pure", _fast)
    assert _paths._choose("compiled") == ("compiled", _cfast)
    with pytest.raises(CodecChoiceError, match="expected auto, pure or compiled"):
        _paths._choose("fast")


# A coordinator's stored records: the length field holds -length - 1 and the watermarks
# follow the record (``ambrosia_ic.logstore.watermarks``).
NAMES = {b"peer": "peer", b"pear": "pear", b"bob": "bob", "é".encode(): "é", b"x" * 70: "x" * 70}


def one_input(name: bytes, value: int) -> bytes:
    return (b"\x02" + encode_zz32(len(name)) + name + struct.pack("<qq", value, value)
            + b"\x00")


WATERMARKS = [
    b"\x00\x00",  # no inputs, no trims
    b"\x04" + one_input(b"peer", 1)[1:-1] + one_input(b"bob", 2)[1:],  # two inputs
    one_input(b"peer", 3)[:-1] + b"\x02" + encode_zz32(6) + b"#epoch" + struct.pack("<q", 4),
    one_input(b"x" * 70, 5),  # a name of a two-byte length
    one_input(b"stranger", 6),  # a name not seen before
]


def stored(cid: int, seq: int, body: bytes, watermarks: bytes) -> bytes:
    length = 24 + len(body)
    return HEADER.pack(cid, -length - 1, check_bytes(body), seq) + body + watermarks


def spans(impl: Any, buf: Any, pos: int, size: int, cid: int | None, expect: int | None
          ) -> tuple[Any, ...]:
    names, inputs, starts = dict(NAMES), {"before": 1}, array("q", [3])
    got = impl.stored_spans(buf, pos, size, cid, expect, names, inputs, starts)
    return got, inputs, list(starts), names


def stored_streams() -> st.SearchStrategy[bytes]:
    usual = st.builds(one_input, st.sampled_from([b"peer", b"pear", b"bob", "é".encode()]),
                      st.integers(-(1 << 63), (1 << 63) - 1))
    record = st.tuples(st.sampled_from([7] * 6 + [8]), st.sampled_from([0] * 6 + [1, -1, -20]),
                       st.binary(max_size=60),
                       st.one_of(usual, usual, usual, st.sampled_from(WATERMARKS)))
    return st.lists(record, max_size=8).map(lambda rs: b"".join(
        stored(cid, 5 + i + skew, body, wm) for i, (cid, skew, body, wm) in enumerate(rs)))


@SETTINGS
@given(st.one_of(stored_streams(), stored_streams().flatmap(s.mutations)),
       st.sampled_from([None, 7]), st.sampled_from([None, 5, 6]), st.integers(0, 3),
       st.integers(0, 30))
def test_stored_spans_agree_on_any_input(buf, cid, expect, pos, short):
    size = max(0, len(buf) - short)
    assert spans(_cfast, buf, pos, size, cid, expect) == spans(_fast, buf, pos, size, cid,
                                                               expect)


def test_stored_spans_take_the_usual_records_and_stop_at_anything_else(tmp_path):
    usual = [stored(7, 5 + i, bytes(i), one_input((b"peer", b"pear", b"bob")[i % 3], 10 + i))
             for i in range(1200)]  # past the compiled loop's block of 512 starts
    odd = [stored(7, 1205, b"z", wm) for wm in WATERMARKS]
    offsets = [sum(map(len, usual[:i])) for i in range(len(usual))]
    whole = b"".join(usual)
    path = tmp_path / "log"
    for tail in (b"", *odd, stored(8, 1205, b"z", one_input(b"peer", 1)),
                 stored(7, 1206, b"z", one_input(b"peer", 1)), usual[0][:-1]):
        buf = whole + tail
        want = ((len(whole), 1200, 1204), {"before": 1, "peer": 1207, "pear": 1208, "bob": 1209},
                [3, *offsets], NAMES)
        path.write_bytes(buf)
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            for impl in IMPLS.values():
                assert spans(impl, buf, 0, len(buf), 7, 5) == want
                assert spans(impl, m, 0, len(buf), 7, 5) == want
                if not tail:
                    assert spans(impl, m, 0, len(buf), None, None) == want
    for impl in IMPLS.values():  # a size short of the file: a sealed log's limit
        assert spans(impl, whole, 0, offsets[9] + 5, 7, 5)[0] == (offsets[9], 9, 13)
        assert spans(impl, whole, 0, len(whole), 7, 6)[0] == (0, 0, None)
        names: dict[bytes, str] = {}
        inputs: dict[str, int] = {}
        starts = array("l")
        assert impl.stored_spans(whole, 0, len(whole), 7, 5, names, inputs, starts) == \
            (0, 0, None)  # no name seen yet: the general reader decodes the first


def as_wire(impl: Any, buf: Any, offsets: Any, i: int, seq: int, max_bytes: int
            ) -> tuple[bytes, int, bool]:
    out, nxt, ok = impl.stored_as_wire(buf, offsets, i, seq, max_bytes)
    return bytes(out), nxt, ok


def stored_log(n: int) -> tuple[bytes, list[int]]:
    records = [stored(7, 5 + i, bytes([i % 256]) * (i % 40), one_input(b"peer", i))
               for i in range(n)]
    return b"".join(records), [sum(map(len, records[:i])) for i in range(n)]


@SETTINGS
@given(st.integers(0, 12), st.data())
def test_stored_as_wire_agree_on_any_input(n, data):
    buf, offsets = stored_log(n)
    buf = data.draw(st.one_of(st.just(buf), s.mutations(buf))) if buf else buf
    offsets = data.draw(st.one_of(st.just(offsets), st.permutations(offsets)))
    i = data.draw(st.integers(0, n))
    seq = data.draw(st.sampled_from([5 + i, 4 + i, 5]))
    max_bytes = data.draw(st.sampled_from([0, 1, 30, 100, 1 << 20]))
    want = as_wire(_fast, buf, offsets, i, seq, max_bytes)
    assert as_wire(_cfast, buf, array("q", offsets), i, seq, max_bytes) == want
    assert as_wire(_cfast, buf, offsets, i, seq, max_bytes) == want  # a list: pure


def test_stored_as_wire_cuts_the_wire_form_and_stops_at_a_changed_record():
    buf, offsets = stored_log(300)
    wire = [encode_record(7, 5 + i, bytes([i % 256]) * (i % 40)) for i in range(300)]
    for impl in IMPLS.values():
        starts = array("q", offsets)
        assert as_wire(impl, buf, starts, 0, 5, 1 << 20) == (b"".join(wire), 300, True)
        got, nxt, ok = as_wire(impl, buf, starts, 10, 15, 100)
        assert ok and got == b"".join(wire[10:nxt]) and len(got) >= 100
        assert len(got) - len(wire[nxt - 1]) < 100  # it stops at the first record past it
        assert as_wire(impl, buf, starts, 10, 16, 100) == (b"", 10, False)
        cut = buf[: offsets[201] + 20]  # the file lost the end of record 201
        assert as_wire(impl, cut, starts, 0, 5, 1 << 20) == (b"".join(wire[:201]), 201, False)
        assert as_wire(impl, buf, starts, 300, 305, 1 << 20) == (b"", 300, True)


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
        _paths._choose("compiled")
    assert _paths._choose("auto") == ("pure", _fast)
