"""Hypothesis: round trips, arbitrary splits, and damaged input that must fail cleanly."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import RemoteProtocolError
from ambrosia_core.wire import (
    NEED_DATA,
    Checkpoint,
    Direction,
    LogRecord,
    LogRecordDecoder,
    MessageStreamDecoder,
    decode_body,
    decode_messages,
    encode_checkpoint_record,
    encode_message,
    encode_record,
)
from tests import strategies as s

from .helpers import feed, split_at

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _decode_one(data: bytes, direction: Direction):
    (msg,) = decode_messages(data, 0, len(data), direction)
    return msg


@SETTINGS
@given(s.to_binding_messages)
def test_to_binding_round_trip(msg):
    data = encode_message(msg)
    assert _decode_one(data, Direction.TO_BINDING) == msg
    assert encode_message(_decode_one(data, Direction.TO_BINDING)) == data


@SETTINGS
@given(st.one_of(s.to_coordinator_messages, st.integers(0, 2**63 - 1).map(Checkpoint)))
def test_to_coordinator_round_trip(msg):
    data = encode_message(msg)
    decoder = MessageStreamDecoder()
    decoder.receive_data(data)
    decoded = decoder.next_event()
    assert decoded == msg
    assert encode_message(decoded) == data


@SETTINGS
@given(s.link_messages)
def test_link_round_trip(msg):
    data = encode_message(msg)
    assert _decode_one(data, Direction.LINK) == msg
    assert encode_message(_decode_one(data, Direction.LINK)) == data


@SETTINGS
@given(s.link_messages, st.integers(0, 5))
def test_decode_body_with_base_offset(msg, pad):
    frame = encode_message(msg)
    data = b"\xee" * pad + frame
    assert decode_messages(data, pad, len(data), Direction.LINK, base=100) == [msg]
    type_at = pad + _prefix_len(frame)
    assert decode_body(data[type_at], data, type_at + 1, len(data), Direction.LINK) == msg


def _prefix_len(frame: bytes) -> int:
    n = 1
    while frame[n - 1] & 0x80:
        n += 1
    return n


@SETTINGS
@given(s.committer_ids, st.integers(0, 2**62), st.lists(s.to_binding_messages, max_size=5))
def test_record_round_trip(committer, seq, messages):
    data = LogRecord(committer, seq, messages).encode()
    (record,) = feed(LogRecordDecoder(), [data])
    assert record.committer_id == committer
    assert record.seq_id == seq
    assert record.messages == messages
    assert record.encode() == data


@SETTINGS
@given(s.record_streams(), st.data())
def test_record_stream_split_anywhere(stream, data):
    raw, expected = stream
    assert feed(LogRecordDecoder(), [raw]) == expected
    pieces = split_at(raw, data.draw(s.cut_points(len(raw))))
    assert feed(LogRecordDecoder(), pieces) == expected
    assert feed(LogRecordDecoder(), pieces, batched=True) == expected


@SETTINGS
@given(s.to_coordinator_streams(), st.data())
def test_message_stream_split_anywhere(stream, data):
    raw, expected = stream
    assert feed(MessageStreamDecoder(), [raw]) == expected
    assert feed(MessageStreamDecoder(), [raw], batched=True) == expected
    pieces = split_at(raw, data.draw(s.cut_points(len(raw))))
    assert feed(MessageStreamDecoder(), pieces) == expected
    assert feed(MessageStreamDecoder(), pieces, batched=True) == expected


def _must_fail_cleanly(decoder, pieces: list[bytes], batched: bool = False) -> None:
    """Only RemoteProtocolError or NEED_DATA; never another exception, never a hang."""
    try:
        feed(decoder, pieces, batched=batched)
    except RemoteProtocolError as err:
        event(type(err).__name__)
        # Once broken, the decoder refuses to go on, with the same error.
        with pytest.raises(RemoteProtocolError) as again:
            decoder.next_event()
        assert again.value is err
        with pytest.raises(RemoteProtocolError):
            decoder.receive_data(b"\x00")
    else:
        event("no error")
        assert decoder.next_event() is NEED_DATA


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=200), st.data())
def test_random_bytes_records(raw, data):
    pieces = split_at(raw, data.draw(s.cut_points(len(raw))))
    _must_fail_cleanly(LogRecordDecoder(max_frame_size=4096), pieces)
    _must_fail_cleanly(LogRecordDecoder(max_frame_size=4096, verify_checksums=False), pieces)


@FUZZ
@given(st.binary(max_size=200), st.data())
def test_random_bytes_messages(raw, data):
    pieces = split_at(raw, data.draw(s.cut_points(len(raw))))
    _must_fail_cleanly(MessageStreamDecoder(max_frame_size=4096), pieces)
    _must_fail_cleanly(MessageStreamDecoder(max_frame_size=4096), pieces, batched=True)
    _must_fail_cleanly(MessageStreamDecoder(max_frame_size=4096, direction=Direction.LINK), pieces)


@FUZZ
@given(s.record_streams(), st.data())
def test_mutated_record_streams(stream, data):
    raw, _ = stream
    damaged = data.draw(s.mutations(raw))
    pieces = split_at(damaged, data.draw(s.cut_points(len(damaged))))
    _must_fail_cleanly(LogRecordDecoder(max_frame_size=1 << 16), pieces)
    # Without check bytes to catch them, damaged bodies reach the message decoder.
    _must_fail_cleanly(LogRecordDecoder(max_frame_size=1 << 16, verify_checksums=False), pieces)


@FUZZ
@given(s.to_coordinator_streams(), st.data())
def test_mutated_message_streams(stream, data):
    raw, _ = stream
    damaged = data.draw(s.mutations(raw))
    pieces = split_at(damaged, data.draw(s.cut_points(len(damaged))))
    _must_fail_cleanly(MessageStreamDecoder(max_frame_size=1 << 16), pieces)
    _must_fail_cleanly(MessageStreamDecoder(max_frame_size=1 << 16), pieces, batched=True)


@FUZZ
@given(st.lists(s.to_binding_messages, max_size=4), st.data())
def test_mutated_record_bodies(messages, data):
    """A valid header and check bytes over a damaged body: only the message decoder can object."""
    body = b"".join(encode_message(m) for m in messages)
    damaged = data.draw(s.mutations(body))
    raw = encode_record(1, 0, damaged) + encode_checkpoint_record(1, 0)
    _must_fail_cleanly(LogRecordDecoder(), [raw])
