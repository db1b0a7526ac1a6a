"""Each fast path in ``ambrosia_core.wire._fast`` (and the self-call path inline in
``MessageStreamDecoder.next_event``) against the general decoder on the same input.

The reference decoders here use only ``decode_zz32`` and ``decode_body``. On any input,
valid, damaged or random, the decoders with fast paths must return the same events (equal
with their types) or raise the same error, and a fast path on its own must never raise
and must stop exactly where the general decoder would go on differently.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import RemoteProtocolError
from ambrosia_core.wire import (
    NEED_DATA,
    Direction,
    MessageStreamDecoder,
    OutgoingRpc,
    Rpc,
    decode_body,
    decode_messages,
    encode_outgoing_rpc,
    encode_rpc,
    encode_zz32,
)
from ambrosia_core.wire._fast import incoming_rpcs, long_zz32, outgoing_rpcs
from ambrosia_core.wire.varint import Incomplete, decode_zz32
from tests import strategies as s

from .helpers import split_at

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def general_messages(buf: bytes, direction: Direction) -> list[Any]:
    """A record body decoded frame by frame with the general decoder only."""
    out: list[Any] = []
    pos = 0
    while pos < len(buf):
        try:
            size, body = decode_zz32(buf, pos)
        except Incomplete:
            raise RemoteProtocolError("cut short") from None
        if size < 1 or body + size > len(buf):
            raise RemoteProtocolError("does not fit")
        out.append(decode_body(buf[body], buf, body + 1, body + size, direction))
        pos = body + size
    return out


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except RemoteProtocolError as err:
        return "error", type(err)


@st.composite
def odd_rpc_frames(draw: st.DrawFn, outgoing: bool) -> bytes:
    """RPC-like frames with any reserved byte, any RPC type byte, method ids that may be
    over-long or not minimal, names that may not be UTF-8: each detail a fast path
    checks, got wrong now and then."""
    parts = [b"\x00"]
    if outgoing:
        name = draw(st.one_of(s.names.map(str.encode), st.binary(max_size=4)))
        parts += [encode_zz32(len(name)), name]
    parts.append(bytes((draw(st.sampled_from([0, 0, 0, 1, 255])),)))
    parts.append(draw(st.one_of(
        s.method_ids.map(encode_zz32),
        st.sampled_from([b"\x80\x00", b"\xff\xff\xff\xff\x1f", b"\x81\x80\x80\x80\x80\x01"]),
    )))
    parts.append(bytes((draw(st.sampled_from([0, 1, 2, 3, 200])),)))
    parts.append(draw(st.binary(max_size=80)))
    data = b"".join(parts)
    return encode_zz32(len(data)) + data


# Bodies made mostly of the frames the fast paths take: small and large method ids,
# small and large arguments, with odd frames and other messages mixed in.
incoming_frames = st.one_of(
    st.builds(encode_rpc, s.method_ids, s.rpc_types, st.binary(max_size=200)),
    odd_rpc_frames(outgoing=False),
)
outgoing_frames = st.one_of(
    st.builds(encode_outgoing_rpc, s.names, s.method_ids, s.rpc_types, st.binary(max_size=200)),
    odd_rpc_frames(outgoing=True),
)
to_binding_bodies = st.lists(
    st.one_of(incoming_frames, incoming_frames, s.to_binding_messages.map(lambda m: m.encode())),
    max_size=8,
).map(b"".join)
to_coordinator_bodies = st.lists(
    st.one_of(outgoing_frames, outgoing_frames,
              s.to_coordinator_messages.map(lambda m: m.encode())),
    max_size=8,
).map(b"".join)


@st.composite
def damaged(draw: st.DrawFn, bodies: st.SearchStrategy[bytes]) -> bytes:
    data = draw(bodies)
    return draw(st.one_of(st.just(data), s.mutations(data), st.binary(max_size=64)))


# ------------------------------------------------------------------ long_zz32

@given(st.binary(min_size=1, max_size=8), st.integers(0, 8))
def test_long_zz32_agrees_with_decode_zz32_or_declines(data, cut):
    data = bytes((data[0] | 0x80,)) + data[1:]
    end = min(len(data), max(1, cut))
    got = long_zz32(data, 0, end)
    if got is not None:
        assert got == decode_zz32(data[:end], 0)


def test_long_zz32_declines_what_the_general_decoder_must_report():
    assert long_zz32(b"\x80\x00", 0, 2) is None  # not minimal
    assert long_zz32(b"\xff\xff\xff\xff\x1f", 0, 5) is None  # overflows 32 bits
    assert long_zz32(b"\x80\x80", 0, 2) is None  # cut short
    assert long_zz32(b"\x96\x01", 0, 2) == (75, 2)


# ------------------------------------------------------------------ incoming_rpcs

@SETTINGS
@given(damaged(to_binding_bodies))
def test_incoming_rpcs_decode_exactly_the_prefix_the_general_decoder_agrees_with(buf):
    fast: list[Any] = []
    stop = incoming_rpcs(buf, 0, len(buf), fast.append)  # never raises
    assert 0 <= stop <= len(buf)
    assert all(type(m) is Rpc for m in fast)
    assert general_messages(buf[:stop], Direction.TO_BINDING) == fast


@SETTINGS
@given(damaged(to_binding_bodies), st.sampled_from([Direction.TO_BINDING, Direction.LINK]))
def test_decode_messages_equals_the_general_decoder(buf, direction):
    got = outcome(decode_messages, buf, 0, len(buf), direction)
    want = outcome(general_messages, buf, direction)
    if want[0] == "ok":
        assert got == want
    else:
        assert got[0] == "error"


def test_incoming_rpcs_stop_at_the_first_frame_they_do_not_take():
    rpc = encode_rpc(7, 1, b"ab")
    other = encode_rpc(0, 0, b"result", reserved=1)
    fast: list[Any] = []
    assert incoming_rpcs(rpc + other + rpc, 0, 3 * len(rpc) + len(other), fast.append) \
        == len(rpc)
    assert fast == [Rpc(7, 1, b"ab")]


# ------------------------------------------------------------------ outgoing_rpcs

@SETTINGS
@given(damaged(to_coordinator_bodies), st.integers(64, 1 << 20))
def test_outgoing_rpcs_decode_exactly_the_prefix_the_general_decoder_agrees_with(buf, limit):
    fast: list[Any] = []
    stop = outgoing_rpcs(buf, 0, limit, {}, fast.append, False)  # never raises
    assert 0 <= stop <= len(buf)
    assert all(type(m) is OutgoingRpc for m in fast)
    assert general_messages(buf[:stop], Direction.TO_COORDINATOR) == fast


def test_outgoing_rpcs_once_takes_one_frame():
    a = encode_outgoing_rpc("peer", 300, 0, b"x")
    b = encode_outgoing_rpc("", 1, 1, b"y")
    fast: list[Any] = []
    assert outgoing_rpcs(a + b, 0, 1 << 20, {}, fast.append, True) == len(a)
    assert fast == [OutgoingRpc("peer", 300, 0, b"x")]


# ------------------------------------------------- the stream decoder, fast and not

def _stream_events(data: bytes, cuts: list[int], fast: bool, use_drain: bool) -> tuple[str, Any]:
    decoder = MessageStreamDecoder()
    decoder._fast = fast  # the general path alone is the reference
    out: list[Any] = []
    try:
        for piece in split_at(data, cuts):
            decoder.receive_data(piece)
            if use_drain:
                out.extend(decoder.drain())
            else:
                while (ev := decoder.next_event()) is not NEED_DATA:
                    out.append(ev)
    except RemoteProtocolError as err:
        return "error", (type(err), out if not use_drain else None)
    return "ok", out


@SETTINGS
@given(st.data())
def test_the_stream_decoders_fast_paths_equal_its_general_path(data):
    stream = data.draw(damaged(to_coordinator_bodies))
    cuts = data.draw(s.cut_points(len(stream)))
    for use_drain in (False, True):
        assert _stream_events(stream, cuts, True, use_drain) == \
            _stream_events(stream, cuts, False, use_drain)


@pytest.mark.parametrize("frame", [
    encode_outgoing_rpc("", 7, 1, b"a self-call"),  # the inline path in next_event
    encode_outgoing_rpc("", -64, 2, b""),
    encode_outgoing_rpc("peer", 0x2F3C4D5E, 0, b"a" * 200),  # outgoing_rpcs
])
def test_each_fast_frame_decodes_as_the_general_path_does(frame):
    assert _stream_events(frame * 3, [], True, False) == _stream_events(frame * 3, [], False, False)
    assert _stream_events(frame * 3, [], True, False) == \
        ("ok", general_messages(frame * 3, Direction.TO_COORDINATOR))


def _raw_frame(*parts: bytes) -> bytes:
    data = b"".join(parts)
    return encode_zz32(len(data)) + data


ODD_DETAILS = {  # each a detail a fast path must leave to the general decoder
    "RPC type 3": (b"\x00", b"\x0e", b"\x03"),
    "RPC type 200": (b"\x00", b"\x0e", b"\xc8"),
    "reserved byte 1 (a result)": (b"\x01", b"\x0e", b"\x00"),
    "method id not minimal": (b"\x00", b"\x80\x00", b"\x00"),
    "method id over 32 bits": (b"\x00", b"\xff\xff\xff\xff\x1f", b"\x00"),
    "method id of six bytes": (b"\x00", b"\x81\x80\x80\x80\x80\x01", b"\x00"),
}


@pytest.mark.parametrize("detail", ODD_DETAILS)
def test_the_incoming_fast_path_leaves_odd_frames_to_the_general_decoder(detail):
    reserved, method, rpc_type = ODD_DETAILS[detail]
    frame = _raw_frame(b"\x00", reserved, method, rpc_type, b"args")
    good = encode_rpc(7, 1, b"ok")
    fast: list[Any] = []
    assert incoming_rpcs(good + frame, 0, len(good) + len(frame), fast.append) == len(good)
    assert fast == [Rpc(7, 1, b"ok")]


@pytest.mark.parametrize("name", [b"", b"peer", b"\xff\xfe"])
@pytest.mark.parametrize("detail", ODD_DETAILS)
def test_the_outgoing_fast_paths_leave_odd_frames_to_the_general_path(detail, name):
    reserved, method, rpc_type = ODD_DETAILS[detail]
    frame = _raw_frame(b"\x00", encode_zz32(len(name)), name, reserved, method, rpc_type, b"a")
    good = encode_outgoing_rpc("", 7, 1, b"ok")
    fast: list[Any] = []
    assert outgoing_rpcs(good + frame, 0, 1 << 20, {}, fast.append, False) == len(good)
    assert fast == [OutgoingRpc("", 7, 1, b"ok")]
    # and through the decoder, whose next_event has its own inline path for self-calls
    for use_drain in (False, True):
        assert _stream_events(good + frame, [], True, use_drain) == \
            _stream_events(good + frame, [], False, use_drain)
