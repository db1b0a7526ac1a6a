"""Golden byte vectors for every message type, checked in both directions.

Every vector was worked out by hand from the protocol document and the wire-facts notes:
``[zz32 size][type][data]`` where size counts the type byte and the data, so a message
with no data is ``02 tt`` (ZigZag(1) = 2). Record check bytes are XXH64 (seed 0) of the
body, as computed by the reference ``xxhash`` library (see ``test_check_bytes_reference``).
Each vector is decoded whole, one byte at a time, and encoded back to the same bytes.
"""

from __future__ import annotations

import struct

import pytest
import xxhash

from ambrosia_core.errors import IllegalDirectionError
from ambrosia_core.wire import (
    CHECKPOINT_SEQ,
    CONTROL_SEQ,
    HEADER_SIZE,
    AttachTo,
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    CountReplayableRpcBatch,
    Direction,
    InitialMessage,
    LogRecord,
    LogRecordDecoder,
    MessageStreamDecoder,
    MessageType,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    RpcType,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    TrimTo,
    UpgradeService,
    UpgradeTakeCheckpoint,
    check_bytes,
    decode_messages,
    encode_checkpoint_record,
    encode_control_record,
    encode_message,
    encode_outgoing_rpc,
    encode_record,
    encode_rpc,
    message_type_of,
)

from .helpers import feed, h, one_byte_at_a_time

HELLO_JSON = b'{"hello":"from JS"}'
HELLO_HEX = "7B 22 68 65 6C 6C 6F 22 3A 22 66 72 6F 6D 20 4A 53 22 7D"
# The Node.js checkpoint blob: "{__ACSv1__}" then JSON, 190 bytes in all.
JS_BLOB = b"{__ACSv1__}" + b'{"state":"' + b"s" * 167 + b'"}'
assert len(JS_BLOB) == 190


# ------------------------------------------------------------ binding -> coordinator

TO_COORDINATOR = [
    # 1 AttachTo: "server" (6 bytes) -> size 7 -> zz 0E
    ("attach_to", "0E 01 73 65 72 76 65 72", AttachTo("server")),
    # 2 TakeCheckpoint: the binding asks for a checkpoint now
    ("take_checkpoint", "02 02", TakeCheckpoint()),
    # 9 InitialMessage as AmbrosiaJS sends it: its version as raw UTF-8
    ("initial_message_js", "0C 09 32 2E 30 2E 31", InitialMessage(b"2.0.1")),
    # 9 InitialMessage as the C# binding sends it: [zz32 5]"hello"
    ("initial_message_cs", "0E 09 0A 68 65 6C 6C 6F", InitialMessage(b"\x0ahello")),
    # 0 self Fork to method 8 (AmbrosiaJS): dest len 0, reserved 0, zz(8)=10, fork; 24 -> zz 30
    (
        "rpc_self_fork",
        "30 00 00 00 10 01 " + HELLO_HEX,
        OutgoingRpc("", 8, RpcType.FORK, HELLO_JSON),
    ),
    # 0 async call to "server", method 300 (zz 600 = D8 04), args AB CD; size 14 -> 1C
    (
        "rpc_async_named",
        "1C 00 0C 73 65 72 76 65 72 00 D8 04 00 AB CD",
        OutgoingRpc("server", 300, RpcType.ASYNC, b"\xab\xcd"),
    ),
    # 0 impulse to "js", method -2 (post by impulse, zz 3), raw args FF 01 02; size 10 -> 14
    (
        "rpc_impulse_negative_method",
        "14 00 04 6A 73 00 03 02 FF 01 02",
        OutgoingRpc("js", -2, RpcType.IMPULSE, b"\xff\x01\x02"),
    ),
    # 0 C#-style return value (reserved 1) to "client": [zz len]["server"][zz64 seq 3][2A]
    (
        "rpc_return_value",
        "24 00 0C 63 6C 69 65 6E 74 01 0C 73 65 72 76 65 72 06 2A",
        OutgoingRpc("client", 0, 0, h("0C 73 65 72 76 65 72 06 2A"), reserved=1),
    ),
    # 5 RPCBatch, outgoing form: count 2; a self fork to 1, an impulse to "js" method 0 {}
    (
        "rpc_batch_outgoing",
        "24 05 04  0A 00 00 00 02 01  12 00 04 6A 73 00 00 02 7B 7D",
        RpcBatch((
            OutgoingRpc("", 1, RpcType.FORK, b""),
            OutgoingRpc("js", 0, RpcType.IMPULSE, b"{}"),
        )),
    ),
    # 8 Checkpoint announcing 0 bytes
    ("checkpoint_empty", "04 08 00", Checkpoint(0)),
    # 8 Checkpoint of 2^40 bytes: zz64 2^41 = 80 80 80 80 80 40
    ("checkpoint_large", "0E 08 80 80 80 80 80 40", Checkpoint(1 << 40)),
]


@pytest.mark.parametrize(("hexbytes", "msg"), [v[1:] for v in TO_COORDINATOR],
                         ids=[v[0] for v in TO_COORDINATOR])
def test_to_coordinator_vectors(hexbytes, msg):
    data = h(hexbytes)
    assert encode_message(msg) == data
    assert msg.encode() == data
    assert data[1] == message_type_of(msg)
    expected = [msg]
    if isinstance(msg, Checkpoint) and msg.size == 0:
        expected.append(CheckpointEnd(0))
    assert feed(MessageStreamDecoder(), [data]) == expected
    if not isinstance(msg, Checkpoint):
        assert feed(MessageStreamDecoder(), [data * 3], batched=True) == expected * 3
    assert feed(MessageStreamDecoder(), one_byte_at_a_time(data)) == expected


def test_encode_rpc_functions_match_vectors():
    assert encode_outgoing_rpc("", 8, 1, HELLO_JSON) == h("30 00 00 00 10 01 " + HELLO_HEX)
    assert encode_outgoing_rpc("server", 300, 0, b"\xab\xcd") == h(
        "1C 00 0C 73 65 72 76 65 72 00 D8 04 00 AB CD"
    )
    assert encode_rpc(8, 1, HELLO_JSON) == h("2E 00 00 10 01 " + HELLO_HEX)
    assert encode_rpc(0, 0, b"\x02s\x02E", reserved=3) == h("0C 00 03 02 73 02 45")


def test_js_startup_from_binding():
    """InitialMessage "2.0.1", then Checkpoint 06 08 FC 02 (zz64 380 = 190) and 190 raw bytes."""
    stream = h("0C 09 32 2E 30 2E 31") + h("06 08 FC 02") + JS_BLOB + h("02 02")
    expected = [
        InitialMessage(b"2.0.1"),
        Checkpoint(190),
        CheckpointChunk(JS_BLOB),
        CheckpointEnd(190),
        TakeCheckpoint(),
    ]
    assert feed(MessageStreamDecoder(), [stream]) == expected
    assert feed(MessageStreamDecoder(), one_byte_at_a_time(stream)) == expected
    assert Checkpoint(190).encode() == h("06 08 FC 02")


# ------------------------------------------------------------ coordinator -> binding

TO_BINDING = [
    # 0 incoming form: the self Fork to method 8 as it comes back; size 23 -> 2E
    ("rpc_fork", "2E 00 00 10 01 " + HELLO_HEX, Rpc(8, RpcType.FORK, HELLO_JSON)),
    # 0 async, method 3 (zz 06), args 01 02
    ("rpc_async", "0C 00 00 06 00 01 02", Rpc(3, RpcType.ASYNC, b"\x01\x02")),
    # 0 impulse, method 63 (zz 7E, the largest one-byte id), no args
    ("rpc_impulse", "08 00 00 7E 02", Rpc(63, RpcType.IMPULSE, b"")),
    # 0 fork, method 64 (zz 128 = 80 01, two bytes)
    ("rpc_fork_two_byte_method", "0A 00 00 80 01 01", Rpc(64, RpcType.FORK, b"")),
    # 0 method -1 ("post" in AmbrosiaJS, zz 01)
    ("rpc_post", "0C 00 00 01 01 7B 7D", Rpc(-1, RpcType.FORK, b"{}")),
    # 0 C# return values: reserved 3 (exception) and 2 (empty), no method id
    ("rpc_return_exception", "0C 00 03 02 73 02 45", Rpc(0, 0, b"\x02s\x02E", reserved=3)),
    ("rpc_return_empty", "0A 00 02 02 73 04", Rpc(0, 0, b"\x02s\x04", reserved=2)),
    ("take_checkpoint", "02 02", TakeCheckpoint()),
    # 5 RPCBatch, incoming form: a fork to 1 and an impulse to 2 with {}
    (
        "rpc_batch",
        "1C 05 04  08 00 00 02 01  0C 00 00 04 02 7B 7D",
        RpcBatch((Rpc(1, RpcType.FORK, b""), Rpc(2, RpcType.IMPULSE, b"{}"))),
    ),
    ("initial_message_echo", "0C 09 32 2E 30 2E 31", InitialMessage(b"2.0.1")),
    ("upgrade_take_checkpoint", "02 0A", UpgradeTakeCheckpoint()),
    ("take_becoming_primary_checkpoint", "02 0B", TakeBecomingPrimaryCheckpoint()),
    ("upgrade_service", "02 0C", UpgradeService()),
    # 13 CountReplayableRPCBatchByte: count 2 (04), replayable 1 (02), then the two RPCs
    (
        "count_replayable_rpc_batch",
        "1E 0D 04 02  08 00 00 02 01  0C 00 00 04 02 7B 7D",
        CountReplayableRpcBatch(
            (Rpc(1, RpcType.FORK, b""), Rpc(2, RpcType.IMPULSE, b"{}")), 1
        ),
    ),
    ("becoming_primary", "02 0F", BecomingPrimary()),
]


@pytest.mark.parametrize(("hexbytes", "msg"), [v[1:] for v in TO_BINDING],
                         ids=[v[0] for v in TO_BINDING])
def test_to_binding_message_vectors(hexbytes, msg):
    data = h(hexbytes)
    assert msg.encode() == data
    assert data[1] == message_type_of(msg)
    assert decode_messages(data, 0, len(data), Direction.TO_BINDING) == [msg]
    stream_decoder = MessageStreamDecoder(direction=Direction.TO_BINDING)
    assert feed(stream_decoder, one_byte_at_a_time(data)) == [msg]


def test_all_to_binding_types_covered():
    types = {h(v[1])[1] for v in TO_BINDING} | {MessageType.CHECKPOINT}
    assert types == {0, 2, 5, 8, 9, 10, 11, 12, 13, 15}
    assert {h(v[1])[1] for v in TO_COORDINATOR} == {0, 1, 2, 5, 8, 9}


# Records: committer 7 (07 00 00 00), length (int32 LE), check (uint64 LE), seq (int64 LE).
REC_TBPC = "07 00 00 00  1A 00 00 00  C7 F1 79 C2 CB 84 2D DA  FF FF FF FF FF FF FF FF  02 0B"
REC_INITIAL_ECHO = (
    "07 00 00 00  1F 00 00 00  50 EC 1B E3 74 64 CA 83  00 00 00 00 00 00 00 00"
    "  0C 09 32 2E 30 2E 31"
)
REC_FORK_8 = (
    "07 00 00 00  30 00 00 00  00 CA 1E 66 B4 9B BC 93  01 00 00 00 00 00 00 00"
    "  2E 00 00 10 01 " + HELLO_HEX
)
REC_CHECKPOINT = (
    "07 00 00 00  1C 00 00 00  00 00 00 00 00 00 00 00  FE FF FF FF FF FF FF FF  06 08 FC 02"
)
REC_BATCH = (
    "07 00 00 00  27 00 00 00  51 88 EF 22 0F 57 84 3A  02 00 00 00 00 00 00 00"
    "  1C 05 04 08 00 00 02 01 0C 00 00 04 02 7B 7D"
)
REC_COUNTED = (
    "07 00 00 00  28 00 00 00  8D E6 53 80 85 BC 05 80  03 00 00 00 00 00 00 00"
    "  1E 0D 04 02 08 00 00 02 01 0C 00 00 04 02 7B 7D"
)
REC_RETURNS = (
    "07 00 00 00  25 00 00 00  88 57 8B 81 01 FB F3 C5  04 00 00 00 00 00 00 00"
    "  0C 00 03 02 73 02 45  0A 00 02 02 73 04"
)
REC_MIX = (
    "07 00 00 00  2A 00 00 00  57 FC 92 C8 A1 59 E3 A2  05 00 00 00 00 00 00 00"
    "  0C 00 00 06 00 01 02  08 00 00 7E 02  0A 00 00 80 01 01"
)
REC_TAKE_CHECKPOINT = (
    "07 00 00 00  1A 00 00 00  FB 74 7B 89 5A 90 33 F8  FF FF FF FF FF FF FF FF  02 02"
)
REC_UPGRADE_TAKE = (
    "07 00 00 00  1A 00 00 00  AC 43 5B A1 51 A0 DE D6  FF FF FF FF FF FF FF FF  02 0A"
)
REC_UPGRADE_SERVICE = (
    "07 00 00 00  1A 00 00 00  7E CB 93 64 6E 0F 48 BF  FF FF FF FF FF FF FF FF  02 0C"
)
REC_BECOMING_PRIMARY = (
    "07 00 00 00  1A 00 00 00  0A 5B F7 E3 9C E3 22 12  FF FF FF FF FF FF FF FF  02 0F"
)

FORK_8 = Rpc(8, RpcType.FORK, HELLO_JSON)
BATCH = (Rpc(1, RpcType.FORK, b""), Rpc(2, RpcType.IMPULSE, b"{}"))

RECORDS = [
    ("tbpc", REC_TBPC, LogRecord(7, -1, [TakeBecomingPrimaryCheckpoint()], 0xDA2D84CBC279F1C7)),
    ("initial_echo", REC_INITIAL_ECHO, LogRecord(7, 0, [InitialMessage(b"2.0.1")],
                                                 0x83CA6474E31BEC50)),
    ("fork_8", REC_FORK_8, LogRecord(7, 1, [FORK_8], 0x93BC9BB4661ECA00)),
    ("batch", REC_BATCH, LogRecord(7, 2, [RpcBatch(BATCH)], 0x3A84570F22EF8851)),
    ("counted", REC_COUNTED, LogRecord(7, 3, [CountReplayableRpcBatch(BATCH, 1)],
                                       0x8005BC858053E68D)),
    ("returns", REC_RETURNS, LogRecord(7, 4, [Rpc(0, 0, b"\x02s\x02E", 3),
                                              Rpc(0, 0, b"\x02s\x04", 2)], 0xC5F3FB01818B5788)),
    ("mix", REC_MIX, LogRecord(7, 5, [Rpc(3, 0, b"\x01\x02"), Rpc(63, 2, b""), Rpc(64, 1, b"")],
                               0xA2E359A1C892FC57)),
    ("take_checkpoint", REC_TAKE_CHECKPOINT, LogRecord(7, -1, [TakeCheckpoint()],
                                                       0xF833905A897B74FB)),
    ("upgrade_take", REC_UPGRADE_TAKE, LogRecord(7, -1, [UpgradeTakeCheckpoint()],
                                                 0xD6DEA051A15B43AC)),
    ("upgrade_service", REC_UPGRADE_SERVICE, LogRecord(7, -1, [UpgradeService()],
                                                       0xBF480F6E6493CB7E)),
    ("becoming_primary", REC_BECOMING_PRIMARY, LogRecord(7, -1, [BecomingPrimary()],
                                                         0x1222E39CE3F75B0A)),
]


@pytest.mark.parametrize(("hexbytes", "record"), [v[1:] for v in RECORDS],
                         ids=[v[0] for v in RECORDS])
def test_record_vectors(hexbytes, record):
    data = h(hexbytes)
    assert record.encode() == data
    body = data[HEADER_SIZE:]
    assert encode_record(record.committer_id, record.seq_id, body) == data
    if record.seq_id == CONTROL_SEQ:
        assert encode_control_record(7, record.messages[0]) == data
    assert feed(LogRecordDecoder(), [data]) == [record]
    assert feed(LogRecordDecoder(), one_byte_at_a_time(data)) == [record]


def test_check_bytes_reference():
    # XXH64 of the empty input with seed 0 is a published constant.
    assert check_bytes(b"") == 0xEF46DB3751D8E999
    for _, hexbytes, record in RECORDS:
        data = h(hexbytes)
        assert struct.unpack_from("<Q", data, 8)[0] == record.check_bytes
        assert xxhash.xxh64_intdigest(data[HEADER_SIZE:]) == record.check_bytes


def test_header_layout_field_by_field():
    data = h(REC_FORK_8)
    assert len(data) == 0x30 == 48
    assert data[0:4] == b"\x07\x00\x00\x00"  # committer id 7, little-endian int32
    assert int.from_bytes(data[4:8], "little", signed=True) == len(data)  # length incl. header
    assert int.from_bytes(data[8:16], "little") == check_bytes(data[24:])  # XXH64 of the body
    assert int.from_bytes(data[16:24], "little", signed=True) == 1  # sequence id
    assert data[24:] == h("2E 00 00 10 01 " + HELLO_HEX)
    # Byte order of every field, with values whose bytes all differ.
    rec = LogRecord(0x0A0B0C0D, 0x0102030405060708, [TakeCheckpoint()]).encode()
    assert rec[0:4] == h("0D 0C 0B 0A")
    assert rec[4:8] == h("1A 00 00 00")
    assert rec[16:24] == h("08 07 06 05 04 03 02 01")
    (event,) = feed(LogRecordDecoder(), [rec])
    assert event.committer_id == 0x0A0B0C0D
    assert event.seq_id == 0x0102030405060708
    assert event.check_bytes == int.from_bytes(rec[8:16], "little")
    # A negative committer id is a signed int32.
    neg = LogRecord(-2, -1, [BecomingPrimary()]).encode()
    assert neg[0:4] == h("FE FF FF FF")
    assert feed(LogRecordDecoder(), [neg])[0].committer_id == -2


def test_checkpoint_record_vector():
    """A -2 record holding 06 08 FC 02, check bytes 0, then 190 raw bytes outside the record."""
    data = h(REC_CHECKPOINT)
    assert encode_checkpoint_record(7, 190) == data
    assert LogRecord(7, CHECKPOINT_SEQ, [Checkpoint(190)]).encode() == data
    stream = data + JS_BLOB
    expected = [
        LogRecord(7, -2, [Checkpoint(190)], 0),
        CheckpointChunk(JS_BLOB),
        CheckpointEnd(190),
    ]
    assert feed(LogRecordDecoder(), [stream]) == expected
    assert feed(LogRecordDecoder(), one_byte_at_a_time(stream)) == expected


def test_js_startup_from_coordinator():
    """First start: TakeBecomingPrimaryCheckpoint, then seq 0 echoing the InitialMessage whole,
    then the RPCs (here the self Fork to method 8) in later records."""
    stream = h(REC_TBPC) + h(REC_INITIAL_ECHO) + h(REC_FORK_8)
    expected = [RECORDS[0][2], RECORDS[1][2], RECORDS[2][2]]
    assert feed(LogRecordDecoder(), [stream]) == expected
    assert feed(LogRecordDecoder(), one_byte_at_a_time(stream)) == expected


def test_echo_and_rpc_in_one_record():
    body = h("0C 09 32 2E 30 2E 31") + h("2E 00 00 10 01 " + HELLO_HEX)
    data = h("07 00 00 00  37 00 00 00  8C 15 69 F0 FA 14 73 6C  00 00 00 00 00 00 00 00") + body
    record = LogRecord(7, 0, [InitialMessage(b"2.0.1"), FORK_8], 0x6C7314FAF069158C)
    assert record.encode() == data
    assert feed(LogRecordDecoder(), one_byte_at_a_time(data)) == [record]


def test_recovery_sequence():
    """Recovery: checkpoint record and blob, replayed records, then TakeBecomingPrimary..."""
    stream = h(REC_CHECKPOINT) + JS_BLOB + h(REC_INITIAL_ECHO) + h(REC_FORK_8) + h(REC_TBPC)
    expected = [
        LogRecord(7, -2, [Checkpoint(190)], 0),
        CheckpointChunk(JS_BLOB),
        CheckpointEnd(190),
        RECORDS[1][2],
        RECORDS[2][2],
        RECORDS[0][2],
    ]
    assert feed(LogRecordDecoder(), [stream]) == expected
    assert feed(LogRecordDecoder(), one_byte_at_a_time(stream)) == expected


# ------------------------------------------------------------ coordinator -> coordinator

def test_trim_to_link_vector():
    # 14 TrimTo(300): zz64 600 = D8 04; size 3 -> 06
    data = h("06 0E D8 04")
    assert TrimTo(300).encode() == data
    assert feed(MessageStreamDecoder(direction=Direction.LINK), one_byte_at_a_time(data)) == [
        TrimTo(300)
    ]
    record = h("07 00 00 00  1C 00 00 00  B7 E0 3D 34 13 8A EB E2  09 00 00 00 00 00 00 00") + data
    expected = LogRecord(7, 9, [TrimTo(300)], 0xE2EB8A13343DE0B7)
    assert expected.encode() == record
    link = LogRecordDecoder(direction=Direction.LINK)
    assert feed(link, one_byte_at_a_time(record)) == [expected]
    # TrimTo(-1) (zz 01) is representable on the link.
    assert TrimTo(-1).encode() == h("04 0E 01")


@pytest.mark.parametrize("hexbytes", ["06 0E D8 04", "0E 01 73 65 72 76 65 72"],
                         ids=["trim_to", "attach_to"])
def test_link_and_binding_only_types_rejected_from_coordinator(hexbytes):
    data = h(hexbytes)
    with pytest.raises(IllegalDirectionError) as info:
        decode_messages(data, 0, len(data), Direction.TO_BINDING)
    assert info.value.message_type == data[1]
    assert info.value.offset == 1
    with pytest.raises(IllegalDirectionError):
        feed(LogRecordDecoder(), [encode_record(7, 0, data)])
