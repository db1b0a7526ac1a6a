"""Golden byte vectors for every frame and every 2PC message, checked both ways.

Each vector was written by hand from the layout real peers speak (the Wallaroo part of the
peer-protocol facts): ``U32 length | U8 tag | body``, the length counting tag and body,
every integer big-endian, ``short_bytes`` = ``U16 length | bytes``. Each one is encoded and
compared byte for byte, decoded whole and decoded fed one byte at a time.
"""

from __future__ import annotations

import pytest
from ambrosia_services.connectors import (
    Ack,
    EosMessage,
    ErrorFrame,
    FrameReader,
    Hello,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    OkCredit,
    OkSource,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Restart,
    TwoPCReply,
    Where,
    WorkersLeft,
    decode_frame,
    decode_twopc,
    encode_frame,
    encode_twopc,
    twopc_message,
)

from .helpers import frames_of, h

U64_MAX_HEX = "FF FF FF FF FF FF FF FF"
ZERO8 = "00 00 00 00 00 00 00 00"

FRAMES = [
    # HELLO from a source: version "0.0.1", no cookie, program "feed", instance "f1".
    # body 7 + 2 + 6 + 4 = 19, + tag = 0x14
    (
        "hello_source",
        "00 00 00 14 00  00 05 30 2E 30 2E 31  00 00  00 04 66 65 65 64  00 02 66 31",
        Hello("0.0.1", b"", "feed", "f1"),
    ),
    # HELLO from Wallaroo's sink side: version "v0.0.1", cookie "k", program "w", instance "s"
    # body 8 + 3 + 3 + 3 = 17, + tag = 0x12
    (
        "hello_sink",
        "00 00 00 12 00  00 06 76 30 2E 30 2E 31  00 01 6B  00 01 77  00 01 73",
        Hello("v0.0.1", b"k", "w", "s"),
    ),
    # OK(500) as Wallaroo's libraries write it: credits, empty credit list, empty source list
    ("ok", "00 00 00 0D 01  00 00 01 F4  00 00 00 00  00 00 00 00", Ok(500)),
    # OK with one credit entry (1, "a", 3) and one source ("s", "h:1"): 39 + 1 = 0x28
    (
        "ok_lists",
        "00 00 00 28 01  00 00 00 02  00 00 00 01  00 00 00 00 00 00 00 01  00 01 61"
        "  00 00 00 00 00 00 00 03  00 00 00 01  00 01 73  00 03 68 3A 31",
        Ok(2, (OkCredit(1, "a", 3),), (OkSource("s", "h:1"),)),
    ),
    # ERROR "bad cookie": 2 + 10 + 1 = 0x0D
    (
        "error",
        "00 00 00 0D 02  00 0A 62 61 64 20 63 6F 6F 6B 69 65",
        ErrorFrame("bad cookie"),
    ),
    # NOTIFY stream 0x0102030405060708 "f.txt" from point of reference 0: 23 + 1 = 0x18
    (
        "notify",
        "00 00 00 18 03  01 02 03 04 05 06 07 08  00 05 66 2E 74 78 74  " + ZERO8,
        Notify(0x0102030405060708, "f.txt", 0),
    ),
    # NOTIFY_ACK success, stream 1, point of reference 42: 17 + 1 = 0x12
    (
        "notify_ack",
        "00 00 00 12 04  01  00 00 00 00 00 00 00 01  00 00 00 00 00 00 00 2A",
        NotifyAck(True, 1, 42),
    ),
    # NOTIFY_ACK refused, point of reference U64 max ("from the start" to Wallaroo's feed)
    (
        "notify_ack_refused",
        "00 00 00 12 04  00  00 00 00 00 00 00 00 01  " + U64_MAX_HEX,
        NotifyAck(False, 1, 2**64 - 1),
    ),
    # MESSAGE stream 1, id 300, event time -1, key "k", payload "hi\n"; no flags byte.
    # 8 + 8 + 8 + 3 + 3 = 30, + tag = 0x1F
    (
        "message",
        "00 00 00 1F 05  00 00 00 00 00 00 00 01  00 00 00 00 00 00 01 2C  "
        + U64_MAX_HEX
        + "  00 01 6B  68 69 0A",
        Message(1, 300, b"hi\n", -1, b"k"),
    ),
    # MESSAGE with no key and no payload: 26 + 1 = 0x1B
    (
        "message_empty",
        "00 00 00 1B 05  00 00 00 00 00 00 00 02  " + ZERO8 + "  " + ZERO8 + "  00 00",
        Message(2, 0),
    ),
    # ACK 10 credits, (1, 300) and (2, 7): 4 + 4 + 32 + 1 = 0x29
    (
        "ack",
        "00 00 00 29 06  00 00 00 0A  00 00 00 02  00 00 00 00 00 00 00 01"
        "  00 00 00 00 00 00 01 2C  00 00 00 00 00 00 00 02  00 00 00 00 00 00 00 07",
        Ack(10, ((1, 300), (2, 7))),
    ),
    ("ack_empty", "00 00 00 09 06  00 00 00 00  00 00 00 00", Ack(0)),
    # RESTART with an address: U32 length 14, "127.0.0.1:7001": 18 + 1 = 0x13
    (
        "restart",
        "00 00 00 13 07  00 00 00 0E  31 32 37 2E 30 2E 30 2E 31 3A 37 30 30 31",
        Restart("127.0.0.1:7001"),
    ),
    ("restart_no_address", "00 00 00 05 07  00 00 00 00", Restart()),
    # EOS_MESSAGE: the stream id only (8 bytes), no message id
    ("eos", "00 00 00 09 08  00 00 00 00 00 00 00 01", EosMessage(1)),
]

# Forms real peers or the document may send that this library reads but writes otherwise.
DECODE_ONLY = [
    # The document's OK: credits only.
    ("ok_document_form", "00 00 00 05 01  00 00 01 F4", Ok(500)),
    # OK with a credit list and no source list (an older Wallaroo layout).
    ("ok_no_source_list", "00 00 00 09 01  00 00 01 F4  00 00 00 00", Ok(500)),
    # RESTART with an empty body: no address.
    ("restart_empty_body", "00 00 00 01 07", Restart()),
]

# 2PC messages: the payload of a MESSAGE on stream 0 (message id 0, event time 0, no key)
# is the inner tag then the body, with no inner length.
TWOPC = [
    ("list_uncommitted", "C9  00 00 00 00 00 00 00 05", ListUncommitted(5)),
    (
        "reply_uncommitted",
        "CA  00 00 00 00 00 00 00 05  00 00 00 01  00 02 74 31",
        ReplyUncommitted(5, ("t1",)),
    ),
    ("reply_uncommitted_none", "CA  00 00 00 00 00 00 00 06  00 00 00 00", ReplyUncommitted(6)),
    (
        "phase1",
        "CB  00 02 74 31  00 00 00 01  00 00 00 00 00 00 00 01  "
        + ZERO8
        + "  00 00 00 00 00 00 01 2C",
        Phase1("t1", (Where(1, 0, 300),)),
    ),
    ("reply_commit", "CC  00 02 74 31  01", TwoPCReply("t1", True)),
    ("reply_abort", "CC  00 02 74 31  00", TwoPCReply("t1", False)),
    ("phase2_commit", "CD  00 02 74 31  01", Phase2("t1", True)),
    ("phase2_abort", "CD  00 02 74 31  00", Phase2("t1", False)),
    (
        "workers_left",
        "CE  00 00 00 00 00 00 00 09  00 00 00 02  00 02 77 31  00 02 77 32",
        WorkersLeft(9, ("w1", "w2")),
    ),
]
# The MESSAGE header of every 2PC frame: stream 0, id 0, event time 0, key length 0.
TWOPC_HEADER = "05  " + ZERO8 + "  " + ZERO8 + "  " + ZERO8 + "  00 00"


def _decode_all(data: bytes, one_byte: bool) -> list[object]:
    reader = FrameReader()
    raws = []
    if one_byte:
        for i in range(len(data)):
            reader.receive_data(data[i : i + 1])
            raws.extend(frames_of(reader))
    else:
        reader.receive_data(data)
        raws.extend(frames_of(reader))
    assert reader.at_boundary
    return [decode_frame(r.tag, r.body) for r in raws]


@pytest.mark.parametrize(("name", "hexstr", "frame"), FRAMES, ids=[f[0] for f in FRAMES])
def test_frame_encodes_to_golden_bytes(name: str, hexstr: str, frame: object) -> None:
    assert encode_frame(frame) == h(hexstr)  # type: ignore[arg-type]


@pytest.mark.parametrize("one_byte", [False, True], ids=["whole", "one_byte_at_a_time"])
@pytest.mark.parametrize(
    ("name", "hexstr", "frame"), FRAMES + DECODE_ONLY, ids=[f[0] for f in FRAMES + DECODE_ONLY]
)
def test_golden_bytes_decode_to_frame(
    name: str, hexstr: str, frame: object, one_byte: bool
) -> None:
    decoded = _decode_all(h(hexstr), one_byte)
    assert decoded == [frame]
    assert type(decoded[0]) is type(frame)


def test_all_golden_frames_in_one_stream_one_byte_at_a_time() -> None:
    stream = b"".join(h(x) for _, x, _ in FRAMES + DECODE_ONLY)
    assert _decode_all(stream, one_byte=True) == [f for _, _, f in FRAMES + DECODE_ONLY]


def test_every_frame_type_has_a_golden_vector() -> None:
    assert {type(f) for _, _, f in FRAMES} == {
        Hello, Ok, ErrorFrame, Notify, NotifyAck, Message, Ack, Restart, EosMessage
    }
    assert {type(m) for _, _, m in TWOPC} == {
        ListUncommitted, ReplyUncommitted, Phase1, TwoPCReply, Phase2, WorkersLeft
    }


@pytest.mark.parametrize(("name", "hexstr", "msg"), TWOPC, ids=[t[0] for t in TWOPC])
def test_twopc_payload_both_ways(name: str, hexstr: str, msg: object) -> None:
    assert encode_twopc(msg) == h(hexstr)  # type: ignore[arg-type]
    decoded = decode_twopc(h(hexstr))
    assert decoded == msg
    assert type(decoded) is type(msg)


@pytest.mark.parametrize("one_byte", [False, True], ids=["whole", "one_byte_at_a_time"])
@pytest.mark.parametrize(("name", "hexstr", "msg"), TWOPC, ids=[t[0] for t in TWOPC])
def test_twopc_inside_a_message_frame(name: str, hexstr: str, msg: object, one_byte: bool) -> None:
    payload = h(hexstr)
    body = h(TWOPC_HEADER) + payload
    frame_bytes = len(body).to_bytes(4, "big") + body
    assert encode_frame(twopc_message(msg)) == frame_bytes  # type: ignore[arg-type]
    [message] = _decode_all(frame_bytes, one_byte)
    assert message == Message(0, 0, payload)
    assert decode_twopc(message.payload) == msg  # type: ignore[attr-defined]


def test_equal_fields_of_different_types_are_not_equal() -> None:
    # Reply and Phase2 share a layout; a swapped decoder must not pass as the same event.
    assert TwoPCReply("t1", True) != Phase2("t1", True)
    assert decode_twopc(h("CC 00 02 74 31 01")) != Phase2("t1", True)
    assert EosMessage(1) != ListUncommitted(1)
