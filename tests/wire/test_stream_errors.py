"""Each way a peer can break the wire format, the error it gets, and bounded buffering."""

from __future__ import annotations

import pytest
import xxhash

from ambrosia_core.errors import (
    ChecksumMismatchError,
    FrameTooLargeError,
    IllegalDirectionError,
    RemoteProtocolError,
    SequenceGapError,
    UnknownMessageTypeError,
    VarintError,
    WireFormatError,
)
from ambrosia_core.wire import (
    NEED_DATA,
    BecomingPrimary,
    CheckpointChunk,
    CheckpointEnd,
    LogRecord,
    LogRecordDecoder,
    MessageStreamDecoder,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    encode_checkpoint_record,
    encode_control_record,
    encode_record,
)

from .helpers import drain, h

TBPC = encode_control_record(7, TakeBecomingPrimaryCheckpoint())  # 26 bytes


def _header(length: int, seq: int, check: int = 0, committer: int = 7) -> bytes:
    return (committer.to_bytes(4, "little", signed=True) + length.to_bytes(4, "little", signed=True)
            + check.to_bytes(8, "little") + seq.to_bytes(8, "little", signed=True))


def _fail(decoder, data: bytes, cls: type[RemoteProtocolError]) -> RemoteProtocolError:
    decoder.receive_data(data)
    with pytest.raises(cls) as info:
        drain(decoder, 100)
    err = info.value
    # The decoder is broken for good: every later call raises the same error.
    with pytest.raises(cls) as again:
        decoder.next_event()
    assert again.value is err
    with pytest.raises(cls):
        decoder.receive_data(TBPC)
    return err


@pytest.mark.parametrize("length", [0, 23, -1, -(2**31)])
def test_header_length_smaller_than_header(length):
    err = _fail(LogRecordDecoder(), TBPC + _header(length, 5), WireFormatError)
    assert err.offset == 26
    assert err.seq_id == 5
    assert "smaller than the 24-byte header" in str(err)


def test_record_over_max_frame_size_rejected_before_body():
    decoder = LogRecordDecoder(max_frame_size=1024)
    # Only the header has arrived: the bound is enforced before any body byte is read.
    err = _fail(decoder, _header(1025, 0), FrameTooLargeError)
    assert err.offset == 0
    assert err.seq_id == 0
    # Exactly the bound is accepted.
    body = b"\x02\x0f" * ((1024 - 24) // 2)
    ok = LogRecordDecoder(max_frame_size=1024)
    ok.receive_data(encode_record(7, 0, body))
    (record,) = drain(ok, 10)
    assert len(record.messages) == 500


def test_message_overrunning_its_record():
    # The record says 2 body bytes, but the message inside claims 5 (size zz 0A).
    body = h("0A 00")
    err = _fail(LogRecordDecoder(verify_checksums=False), TBPC + _header(26, 0) + body,
                WireFormatError)
    assert err.offset == 26 + 24
    assert err.seq_id == 0
    assert "does not fit" in str(err)


def test_trailing_partial_message_in_record():
    # A whole TakeCheckpoint, then a size byte with no type byte before the record ends.
    body = h("02 02 02")
    data = encode_record(7, 3, body)
    err = _fail(LogRecordDecoder(), data, WireFormatError)
    assert err.offset == 24 + 2
    assert err.seq_id == 3


def test_record_body_shorter_than_length_waits():
    data = encode_record(7, 0, h("02 02"))
    decoder = LogRecordDecoder()
    decoder.receive_data(data[:-1])
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(data[-1:])
    assert decoder.next_event() == LogRecord(7, 0, [TakeCheckpoint()], xxhash.xxh64_intdigest(
        b"\x02\x02"))


def test_wrong_check_bytes():
    good = encode_record(7, 4, h("02 02"))
    bad = good[:8] + bytes([good[8] ^ 1]) + good[9:]
    err = _fail(LogRecordDecoder(), TBPC + bad, ChecksumMismatchError)
    assert err.offset == 26
    assert err.seq_id == 4
    # A control record with nonzero check bytes is checked too.
    bad_control = TBPC[:8] + b"\x01" + TBPC[9:]
    _fail(LogRecordDecoder(), bad_control, ChecksumMismatchError)
    # Verification can be turned off (the real bindings do not check).
    lax = LogRecordDecoder(verify_checksums=False)
    lax.receive_data(bad)
    assert drain(lax, 5)[0].messages == [TakeCheckpoint()]


@pytest.mark.parametrize(("first", "second"), [(0, 2), (5, 5), (5, 4), (0, -3 + 2**40)])
def test_sequence_gap(first, second):
    stream = encode_record(7, first, b"") + TBPC + encode_record(7, second, b"")
    err = _fail(LogRecordDecoder(), stream, SequenceGapError)
    assert err.seq_id == second
    assert err.offset == 24 + 26
    assert f"{second} follows {first}" in str(err)


def test_negative_sequence_ids_other_than_control_and_checkpoint():
    err = _fail(LogRecordDecoder(), encode_record(7, -3, h("02 0F")), WireFormatError)
    assert err.seq_id == -3


@pytest.mark.parametrize("mtype", [3, 4, 6, 7, 16, 127, 255])
def test_unknown_message_type_in_record(mtype):
    body = bytes([0x02, mtype])
    err = _fail(LogRecordDecoder(), TBPC + encode_record(7, 0, body), UnknownMessageTypeError)
    assert err.message_type == mtype
    assert err.offset == 26 + 24 + 1  # the type byte
    assert err.seq_id == 0


@pytest.mark.parametrize("mtype", [3, 4, 6, 7, 16, 255])
def test_unknown_message_type_from_binding(mtype):
    err = _fail(MessageStreamDecoder(), h("02 02") + bytes([0x02, mtype]), UnknownMessageTypeError)
    assert err.message_type == mtype
    assert err.offset == 3


@pytest.mark.parametrize(
    ("body", "mtype"),
    [(h("06 0E D8 04"), 14), (h("0E 01 73 65 72 76 65 72"), 1)],
    ids=["trim_to", "attach_to"],
)
def test_link_and_binding_messages_from_the_coordinator(body, mtype):
    err = _fail(LogRecordDecoder(), TBPC + encode_record(7, 8, body), IllegalDirectionError)
    assert err.message_type == mtype
    assert err.seq_id == 8
    assert err.offset == 26 + 24 + 1


@pytest.mark.parametrize("mtype", [10, 11, 12, 13, 14, 15])
def test_coordinator_only_messages_from_the_binding(mtype):
    err = _fail(MessageStreamDecoder(), bytes([0x02, mtype]), IllegalDirectionError)
    assert err.message_type == mtype


def test_varint_errors_carry_stream_offsets():
    # An over-long method id inside a record that starts at stream offset 26.
    body = h("12 00 00 80 80 80 80 80 01 01")
    err = _fail(LogRecordDecoder(), TBPC + encode_record(7, 0, body), VarintError)
    assert err.offset == 26 + 24 + 3
    assert err.seq_id == 0
    assert "offset 53" in str(err)
    # An over-long size prefix on the binding's stream, after a 2-byte message.
    err = _fail(MessageStreamDecoder(), h("02 02 80 80 80 80 80 01"), VarintError)
    assert err.offset == 2
    assert "offset 2" in str(err)


@pytest.mark.parametrize(
    ("hexbytes", "why", "offset", "mtype"),
    [
        ("00", "at least 1", 0, None),  # size 0
        ("01 00", "at least 1", 0, None),  # size -1
        ("04 02 00", "carries no data", 2, 2),  # TakeCheckpoint with a data byte
        ("06 08 01 00", "extra bytes", 3, 8),  # Checkpoint with a byte after its size
        ("04 08 01", "negative checkpoint size", 2, 8),
        ("0A 00 00 00 00 03", "unknown RPC type 3", 5, 0),  # self call, method 0, rpc type 3
        ("06 00 02 61", "no reserved byte", 4, 0),  # destination "a", then nothing
        ("04 00 04", "does not fit", 3, 0),  # destination length 2, no room for it
        ("06 00 02 FF 00 00 00", "not UTF-8", 3, 0),  # destination byte FF
        ("06 01 FF FE", "not UTF-8", 2, 1),  # AttachTo with invalid UTF-8
        ("06 05 04 04 02", "impossible", 2, 5),  # batch of 2 with one byte left
        ("08 05 02 02 02", "only RPCs", 4, 5),  # batch holding a TakeCheckpoint
        ("0A 05 02 06 00 00 00 00", "does not fit the batch", 3, 5),  # inner message too long
    ],
)
def test_malformed_messages_from_binding(hexbytes, why, offset, mtype):
    err = _fail(MessageStreamDecoder(), h(hexbytes), WireFormatError)
    assert why in str(err)
    assert (err.offset, err.message_type) == (offset, mtype)  # where the fault is, by hand


def test_checkpoint_message_outside_checkpoint_record():
    err = _fail(LogRecordDecoder(), encode_record(7, 0, h("04 08 00")), WireFormatError)
    assert err.message_type == 8
    assert err.seq_id == 0


def test_checkpoint_record_without_checkpoint_message():
    data = _header(26, -2) + h("02 0F")
    err = _fail(LogRecordDecoder(), data, WireFormatError)
    assert err.seq_id == -2


def test_counted_batch_with_impossible_replayable_count():
    body = h("10 0D 02 04 08 00 00 02 01")  # count 1, replayable 2
    err = _fail(LogRecordDecoder(), encode_record(7, 0, body), WireFormatError)
    assert err.message_type == 13


# ------------------------------------------------------------------ large checkpoints

CHUNK = 64 * 1024


def _blob_chunk(i: int) -> bytes:
    return bytes([i % 251]) * CHUNK


@pytest.mark.parametrize("which", ["records", "messages"])
def test_huge_checkpoint_streams_through(which):
    """50 MB of checkpoint with max_frame_size 1 MB, fed in 64 KiB pieces, never buffered whole."""
    size = 50 * 1024 * 1024
    n = size // CHUNK
    if which == "records":
        decoder: LogRecordDecoder | MessageStreamDecoder = LogRecordDecoder(max_frame_size=1 << 20)
        head = encode_checkpoint_record(7, size)
        tail = TBPC
    else:
        decoder = MessageStreamDecoder(max_frame_size=1 << 20)
        head = h("0A 08 80 80 80 32")  # Checkpoint(50 MiB): zz64 100 Mi = 80 80 80 32
        tail = h("02 02")
    stream_hash = xxhash.xxh64()
    expected_hash = xxhash.xxh64()
    for i in range(n):
        expected_hash.update(_blob_chunk(i))
    got = 0
    events: list[object] = []

    # The header shares the first piece with checkpoint bytes, and the trailer the last.
    def stream():
        carry = head
        for i in range(n):
            block = carry + _blob_chunk(i)
            yield block[:CHUNK]
            carry = block[CHUNK:]
        yield carry + tail

    most_buffered = 0
    for piece in stream():
        decoder.receive_data(piece)
        most_buffered = max(most_buffered, decoder.buffered)
        for ev in drain(decoder, 10):
            if isinstance(ev, CheckpointChunk):
                assert len(ev.data) <= CHUNK
                stream_hash.update(ev.data)
                got += len(ev.data)
            else:
                events.append(ev)
        assert decoder.buffered == 0
    assert most_buffered <= CHUNK + len(head) + len(tail)
    assert got == size
    assert stream_hash.intdigest() == expected_hash.intdigest()
    assert events[1] == CheckpointEnd(size)
    assert len(events) == 3


# ------------------------------------------------------------------ bounded buffers

@pytest.mark.parametrize("which", ["records", "messages", "checkpoint"])
def test_undrained_input_is_bounded(which):
    bound = 1 << 20
    if which == "records":
        decoder: LogRecordDecoder | MessageStreamDecoder = LogRecordDecoder(max_frame_size=bound)
        unit = encode_control_record(7, BecomingPrimary())
    elif which == "messages":
        decoder = MessageStreamDecoder(max_frame_size=bound)
        unit = h("02 02")
    else:
        decoder = MessageStreamDecoder(max_frame_size=bound)
        decoder.receive_data(h("0A 08 80 80 80 32"))
        assert drain(decoder, 2)[0].size == 50 * 1024 * 1024
        unit = b"\x00"
    piece = unit * (CHUNK // len(unit))
    with pytest.raises(FrameTooLargeError, match="drain"):
        for _ in range(1000):
            decoder.receive_data(piece)  # never calling next_event
            assert decoder.buffered <= 2 * bound + CHUNK
    assert decoder.buffered <= 2 * bound + CHUNK
