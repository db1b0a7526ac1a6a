"""The coordinator's bytes paths against the wire codec on the same inputs: binding
outputs cut and turned into their incoming form by slicing, and link records checked
but kept as bytes."""

from __future__ import annotations

from typing import Any

import pytest
from ambrosia_ic.coordinator.core import CoordinatorCore
from ambrosia_ic.coordinator.frames import (
    LinkRecord,
    LinkRecords,
    _checked_frame_count,
    batch_frames,
    outgoing_frames,
    rpc_frame_count,
    skip_frames,
)
from ambrosia_ic.coordinator.phase import Phase
from ambrosia_ic.logstore import is_impulse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import ChecksumMismatchError, RemoteProtocolError, UnexpectedMessageError
from ambrosia_core.wire import (
    CONTROL_SEQ,
    DEFAULT_MAX_FRAME_SIZE,
    MessageStreamDecoder,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    TrimTo,
    encode_record,
)
from ambrosia_core.wire.fastpaths import incoming_frame_count
from tests import strategies as s

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Sizes of one byte and of several (args up to 300 bytes), names past the 63-byte limit.
big_outgoing = st.builds(OutgoingRpc, st.one_of(st.just(""), st.text(max_size=40)),
                         s.method_ids, s.rpc_types, st.binary(max_size=300), st.just(0))
binding_messages = st.one_of(s.to_coordinator_messages, big_outgoing)


def decoded(stream: bytes) -> list[Any]:
    """What the general decoder makes of ``stream``, up to its first error."""
    dec = MessageStreamDecoder()
    out: list[Any] = []
    try:
        dec.receive_data(stream)
        while (ev := dec.next_event()) is not None and type(ev).__name__ != "NeedData":
            out.append(ev)
    except RemoteProtocolError:
        pass
    return out


def check_against_codec(stream: bytes) -> None:
    frames, pos = outgoing_frames(stream, 0, DEFAULT_MAX_FRAME_SIZE, {})
    events = decoded(stream)
    assert len(frames) <= len(events)
    at = 0
    for f, ev in zip(frames, events, strict=False):
        assert type(ev) is OutgoingRpc
        assert f.frame == stream[at : at + len(f.frame)] == ev.encode()
        assert f.incoming == ev.incoming().encode()
        assert f.destination == ev.destination
        assert f.impulse == is_impulse(ev)
        at += len(f.frame)
    assert pos == at


@SETTINGS
@given(st.lists(binding_messages, max_size=12))
def test_outgoing_frames_are_the_codecs_outputs_and_stop_at_anything_else(
    msgs: list[Any],
) -> None:
    stream = b"".join(m.encode() for m in msgs)
    check_against_codec(stream)
    frames, pos = outgoing_frames(stream, 0, DEFAULT_MAX_FRAME_SIZE, {})
    if pos < len(stream):  # stopped early: the next message is not a short-named RPC
        nxt = msgs[len(frames)]
        assert type(nxt) is not OutgoingRpc or len(nxt.destination.encode()) > 63


@SETTINGS
@given(st.lists(binding_messages, min_size=1, max_size=6), st.data())
def test_damaged_or_cut_streams_never_raise_and_agree_with_the_codec(
    msgs: list[Any], data: st.DataObject
) -> None:
    stream = b"".join(m.encode() for m in msgs)
    check_against_codec(data.draw(s.mutations(stream)))
    check_against_codec(stream[: data.draw(st.integers(0, len(stream)))])


def check_batch_against_codec(stream: bytes) -> None:
    """``batch_frames`` accepts only what the codec reads as one RpcBatch, with the same
    RPCs in the same bytes as if each had been sent alone."""
    got = batch_frames(stream, 0, DEFAULT_MAX_FRAME_SIZE, {})
    if got is None:
        return
    frames, end = got
    events = decoded(stream)
    assert events and type(events[0]) is RpcBatch
    assert end == len(events[0].encode())
    assert len(frames) == len(events[0].rpcs)
    for f, ev in zip(frames, events[0].rpcs, strict=True):
        assert type(ev) is OutgoingRpc
        assert f.frame == ev.encode()
        assert f.incoming == ev.incoming().encode()
        assert f.destination == ev.destination
        assert f.impulse == is_impulse(ev)


@SETTINGS
@given(st.lists(big_outgoing, min_size=1, max_size=8), st.data())
def test_batch_frames_are_the_codecs_batch_and_refuse_anything_odd(
    rpcs: list[OutgoingRpc], data: st.DataObject
) -> None:
    stream = RpcBatch(tuple(rpcs)).encode()
    short = all(len(r.destination.encode()) <= 63 for r in rpcs)
    assert (batch_frames(stream, 0, DEFAULT_MAX_FRAME_SIZE, {}) is not None) == short
    check_batch_against_codec(stream)
    check_batch_against_codec(data.draw(s.mutations(stream)))
    check_batch_against_codec(stream[: data.draw(st.integers(0, len(stream)))])


def test_a_non_minimal_size_is_left_to_the_decoder() -> None:
    good = OutgoingRpc("b", 3, 1, b"x").encode()
    padded = bytes((good[0] | 0x80, 0x00)) + good[1:]  # the same size in two bytes
    frames, pos = outgoing_frames(good + padded, 0, DEFAULT_MAX_FRAME_SIZE, {})
    assert [f.frame for f in frames] == [good] and pos == len(good)


def record(seq: int, rpcs: list[Rpc]) -> bytes:
    return encode_record(0, seq, b"".join(r.encode() for r in rpcs))


@SETTINGS
@given(st.lists(st.lists(s.incoming_rpcs(), min_size=1, max_size=5), max_size=5),
       st.data())
def test_link_records_fed_in_pieces_keep_their_bytes(
    bodies: list[list[Rpc]], data: st.DataObject
) -> None:
    stream = b"".join(record(i + 1, b) for i, b in enumerate(bodies))
    cuts = sorted(data.draw(s.cut_points(len(stream))))
    got: list[LinkRecord] = []
    reader = LinkRecords()
    prev = 0
    for cut in [*cuts, len(stream)]:
        got += reader.receive_data(stream[prev:cut])
        prev = cut
    assert got == [LinkRecord(i + 1, b"".join(r.encode() for r in b), len(b))
                   for i, b in enumerate(bodies)]


def test_a_damaged_link_record_is_refused_and_stays_refused() -> None:
    good = record(1, [Rpc(1, 1, b"abc")])
    bad = bytearray(good)
    bad[-1] ^= 1
    reader = LinkRecords()
    with pytest.raises(ChecksumMismatchError):
        reader.receive_data(bytes(bad))
    with pytest.raises(ChecksumMismatchError):
        reader.receive_data(good)


def test_a_link_record_of_something_else_than_rpcs_is_refused() -> None:
    with pytest.raises(UnexpectedMessageError, match="not an RPC"):
        LinkRecords().receive_data(encode_record(0, 1, TrimTo(4).encode()))
    with pytest.raises(RemoteProtocolError, match="holds no RPC"):
        LinkRecords().receive_data(encode_record(0, 1, b""))


def test_skip_frames_drops_whole_calls() -> None:
    rpcs = [Rpc(i, 1, bytes(i * 30)) for i in range(5)]
    body = b"".join(r.encode() for r in rpcs)
    assert rpc_frame_count(body, "x") == 5
    assert skip_frames(body, 2) == b"".join(r.encode() for r in rpcs[2:])


def test_a_resent_run_is_queued_from_the_first_call_not_yet_accepted() -> None:
    core = CoordinatorCore("B", 1)  # live, its log holding call 1 from A
    core.phase = Phase.LIVE
    core.group.inputs["A"] = 1
    queued = core.group.pending
    calls = [Rpc(7, 1, bytes((i,))) for i in range(8)]

    def feed(seq: int, rpcs: list[Rpc]) -> None:
        for rec in LinkRecords().receive_data(record(seq, rpcs)):
            core.link_record("A", rec)

    feed(1, calls[:1])  # logged before: dropped
    feed(3, calls[1:3])  # calls 2..3
    feed(5, calls[2:5])  # 3..5 after a reconnect: 3 is accepted already
    feed(4, calls[3:4])  # all accepted already
    assert list(queued) == [("A", 3, calls[1].encode() + calls[2].encode()),
                      ("A", 5, calls[3].encode() + calls[4].encode())]
    with pytest.raises(UnexpectedMessageError, match=r"7\.\.7 from A after 5"):
        feed(7, calls[6:7])
    feed(CONTROL_SEQ, calls[5:7])  # Impulses: unnumbered
    assert queued[-1] == (None, None, calls[5].encode() + calls[6].encode())


@SETTINGS
@given(st.lists(st.one_of(s.incoming_rpcs().map(lambda r: r.encode()),
                          st.just(TrimTo(4).encode()), st.binary(max_size=6)),
                min_size=1, max_size=5).map(b"".join), st.data())
def test_the_codecs_count_takes_exactly_the_bodies_the_checking_loop_takes(
    body: bytes, data: st.DataObject
) -> None:
    counts_alike(data.draw(st.one_of(st.just(body), s.mutations(body))))


def counts_alike(body: bytes) -> None:
    count, pos = incoming_frame_count(body, 0, len(body))
    try:
        checked: int | None = _checked_frame_count(body, "x")
    except RemoteProtocolError:
        checked = None
    assert (count if pos == len(body) else None) == checked


@pytest.mark.parametrize("body", [
    b"\x02\x00", b"\x02\x00\x02\x00", b"\x04\x00\x00", b"\x04\x00\x01", b"\x06\x00\x00\x0e\x01",
    b"\x06\x00\x00\x0e\x03", b"\x06\x00\x00\x80\x01", b"\x08\x00\x00\x80\x01\x01",
    b"\x08\x00\x00\x80\x00\x01", b"\x80\x00", b"\x01\x00", b"\x00",
    b"\x0a\x00\x00\xff\xff\xff\xff\x0f", b"\x0c\x00\x00\xff\xff\xff\xff\x1f\x01",
])
def test_the_codecs_count_agrees_with_the_checking_loop_on_edge_bodies(body: bytes) -> None:
    counts_alike(body)
    counts_alike(Rpc(5, 1, b"ok").encode() + body)
