"""The log store's compiled fast paths (``_cfast``) against the pure ones (``_fast``) on
the same inputs, and the choice between them, which follows the wire codec's.

They must agree on everything: what they return, where they stop, and what they leave
in the dictionaries and arrays they fill. Neither raises, so the damage a scan reports
comes from the one general reader once a fast path stops (``test_replay_wire.py``); like
``tests/wire``, these tests also run with ``AMBROSIA_PY_CODEC=pure`` (``make test``), but
for the comparisons, which name both paths whatever the environment chose.
"""

from __future__ import annotations

import mmap
import struct
from array import array
from typing import Any

import pytest

# _cfast without importorskip: a missing build must fail here, never pass as the pure path.
from ambrosia_ic.logstore import _cfast, _fast, fastpaths  # type: ignore[attr-defined]
from ambrosia_ic.logstore import records as log_records
from ambrosia_ic.logstore.watermarks import CHECK_ENTRY, record_check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import CodecChoiceError
from ambrosia_core.wire import check_bytes, encode_record, encode_zz32
from ambrosia_core.wire import fastpaths as wire_fastpaths
from ambrosia_core.wire.records import HEADER
from tests import strategies as s

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
IMPLS = {"pure": _fast, "compiled": _cfast}


def choose(choice: str) -> tuple[str, Any]:
    return wire_fastpaths.choose_fast_paths(_fast, lambda: _cfast, fastpaths._FUNCTIONS,
                                            "the log store's compiled module", choice)


@SETTINGS
@given(st.one_of(st.binary(max_size=200), st.binary(min_size=1000, max_size=5000)))
def test_the_compiled_xxh64_is_the_xxhash_packages(data):
    # The compiled scan hashes in C; the records' check bytes are the package's XXH64.
    assert _cfast.xxh64(data) == check_bytes(data)
    assert _cfast.xxh64(memoryview(data)) == check_bytes(data)


def test_the_scans_use_the_fast_paths_the_codec_chose():
    assert fastpaths.CODEC == wire_fastpaths.CODEC  # both are built here
    assert log_records.stored_spans is IMPLS[fastpaths.CODEC].stored_spans
    assert log_records.stored_as_wire is IMPLS[fastpaths.CODEC].stored_as_wire


def test_a_choice_that_cannot_be_met_is_the_codecs_typed_error(monkeypatch):
    assert choose("pure") == ("pure", _fast)
    assert choose("compiled") == ("compiled", _cfast)
    with pytest.raises(CodecChoiceError, match="expected auto, pure or compiled"):
        choose("fast")
    monkeypatch.delattr(_cfast, "stored_as_wire")  # as a build from before it existed
    with pytest.raises(CodecChoiceError, match="the log store's compiled module is not built "
                       r"\(the build is out of date, it lacks stored_as_wire\)"):
        choose("compiled")
    assert choose("auto") == ("pure", _fast)


# A coordinator's stored records: the length field holds -length - 1 and the watermarks
# follow the record, ending in its check bytes (``ambrosia_ic.logstore.watermarks``).
NAMES = {b"peer": "peer", b"pear": "pear", b"bob": "bob", "é".encode(): "é", b"x" * 70: "x" * 70}
CHECKED = b"\x02" + CHECK_ENTRY  # the trims of a record without an epoch
EPOCH = b"\x04" + encode_zz32(6) + b"#epoch" + struct.pack("<q", 4) + CHECK_ENTRY


def inputs_of(name: bytes, value: int) -> bytes:
    return encode_zz32(len(name)) + name + struct.pack("<qq", value, value)


def one_input(name: bytes, value: int) -> bytes:
    return b"\x02" + inputs_of(name, value) + CHECKED


WATERMARKS = [
    b"\x00" + CHECKED,  # no inputs
    b"\x04" + inputs_of(b"peer", 1) + inputs_of(b"bob", 2) + CHECKED,  # two inputs
    b"\x02" + inputs_of(b"peer", 3) + EPOCH,  # an active/active primary's epoch
    one_input(b"x" * 70, 5),  # a name of a two-byte length
    one_input(b"stranger", 6),  # a name not seen before
    b"\x02" + inputs_of(b"peer", 7) + b"\x00",  # no check bytes (the format before them)
]


def stored(cid: int, seq: int, body: bytes, watermarks: bytes, *, flip: int = 0) -> bytes:
    """A stored record; ``flip`` is XORed into its check bytes."""
    length = 24 + len(body)
    header = HEADER.pack(cid, -length - 1, check_bytes(body), seq)
    if not watermarks.endswith(CHECK_ENTRY):
        return header + body + watermarks
    check = int.from_bytes(record_check(header, watermarks), "little") ^ flip
    return header + body + watermarks + check.to_bytes(8, "little")


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
                 stored(7, 1206, b"z", one_input(b"peer", 1)), usual[0][:-1],
                 stored(7, 1205, b"z", one_input(b"peer", 1), flip=1),
                 stored(7, 1205, b"z", one_input(b"peer", 1), flip=1 << 63)):
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
