"""The ØMQ RAFT frames, byte for byte against the protocol document's examples, and bad
frames from a peer refused with one typed error."""

from __future__ import annotations

from typing import Any

import pytest
from ambrosia_ic.raft import RaftProtocolError
from ambrosia_ic.raft import frames as fr
from hypothesis import given
from hypothesis import strategies as st

from ambrosia_core.errors import EncodeError

UINTS = [
    (0, b"\x00"),
    (255, b"\xff"),
    (256, b"\x00\x01"),
    (9007199254740991, bytes.fromhex("ffffffffffff1f")),
    ((1 << 64) - 1, b"\xff" * 8),
]


@pytest.mark.parametrize(("value", "frame"), UINTS)
def test_uint_both_ways(value: int, frame: bytes) -> None:
    assert fr.encode_uint(value) == frame
    assert fr.decode_uint(frame) == value


def test_uint_frames_out_of_range() -> None:
    with pytest.raises(RaftProtocolError, match="uint frame of 0 bytes"):
        fr.decode_uint(b"")
    with pytest.raises(RaftProtocolError, match="9 bytes"):
        fr.decode_uint(b"\x01" * 9)
    with pytest.raises(RaftProtocolError, match="uint32 frame of 5 bytes"):
        fr.decode_uint32(b"\x01" * 5)
    with pytest.raises(EncodeError):
        fr.encode_uint(1 << 64)
    with pytest.raises(EncodeError):
        fr.encode_uint32(1 << 32)
    assert fr.decode_nuint(b"") is None
    assert fr.encode_nuint(None) == b""
    assert fr.decode_uint32(b"\x01\x02\x03\x04") == 0x04030201


def test_bool_and_json_examples() -> None:
    assert fr.encode_bool(False) == b""
    assert fr.encode_bool(True) == b"\x01"
    assert fr.decode_bool(b"") is False
    assert fr.decode_bool(b"\x00\x01") is False  # the first byte decides
    assert fr.decode_bool(b"\x02") is True
    assert fr.encode_json(None) == b"\xc0"
    assert fr.encode_json([42, "foo", False]) == bytes.fromhex("932aa3666f6fc2")
    assert fr.decode_json(bytes.fromhex("932aa3666f6fc2")) == [42, "foo", False]
    with pytest.raises(RaftProtocolError, match="not a MessagePack value"):
        fr.decode_json(b"\xc1")


def test_entry_examples() -> None:
    reqid = bytes.fromhex("5956dc8826f27e10dcccab20")
    state = fr.encode_entry(reqid, fr.EntryType.STATE, 42, b"foo")
    assert state == reqid + bytes.fromhex("002a000000000000") + b"foo"
    got = fr.decode_entry(state, 7)
    assert got == fr.LogEntry(reqid, fr.EntryType.STATE, 42, b"foo", 7)
    ckpt = fr.encode_entry(b"\0" * 12, fr.EntryType.CHECKPOINT, 43, b"\xc0")
    assert ckpt == b"\0" * 12 + bytes.fromhex("022b000000000000c0")
    assert fr.decode_entry(ckpt).type is fr.EntryType.CHECKPOINT
    with pytest.raises(RaftProtocolError, match="type 9 is unknown"):
        fr.decode_entry(reqid + b"\x09" + b"\0" * 7)
    with pytest.raises(RaftProtocolError, match="19 bytes"):
        fr.decode_entry(state[:19])


def test_request_ids() -> None:
    ids = fr.RequestIds(machine=b"\x01\x02\x03", pid=0x0405)
    a = ids.new(at=0x5956DC88)
    b = ids.new(at=0x5956DC88)
    assert a[:9] == bytes.fromhex("5956dc88010203 0405".replace(" ", ""))
    assert int.from_bytes(b[9:], "big") == (int.from_bytes(a[9:], "big") + 1) & 0xFFFFFF
    assert fr.request_id_time(a) == 0x5956DC88
    assert len(fr.RequestIds().new()) == 12


def test_responses_parse() -> None:
    peers = fr.encode_json([["p1", "tcp://127.0.0.1:1"], ["p2", "tcp://127.0.0.1:2"]])
    cfg = fr.parse_config([b"", fr.encode_json("p2"), peers])
    assert cfg == fr.ConfigReply(False, "p2", (("p1", "tcp://127.0.0.1:1"),
                                                ("p2", "tcp://127.0.0.1:2")))
    assert fr.parse_update([b"\x01"]) == fr.UpdateReply(1)
    assert fr.parse_update([b"\x01", fr.encode_json(17)]).index == 17
    assert fr.parse_update([b"", fr.encode_json("p3")]).leader_id == "p3"
    assert fr.parse_update([b""]) == fr.UpdateReply(0)  # expired: no third frame
    err = fr.parse_update([b"\x02", fr.encode_json({"name": "TypeError"})], config=True)
    assert err.status == 2 and err.error == {"name": "TypeError"}
    entry = fr.encode_entry(b"r" * 12, 0, 1, b"x")
    got = fr.parse_entries([b"\x02", b"\xc0", b"\x05", entry, entry])
    assert got.status is fr.EntriesStatus.MORE and [e.index for e in got.entries] == [4, 5]
    snap = fr.parse_entries([b"\x03", fr.encode_json([0, 10, 3]), b"\x09", b"abcd"])
    assert snap.chunk == fr.SnapshotChunk(0, 10, 3, b"abcd") and not snap.chunk.last
    info = fr.parse_log_info([b"\x01", fr.encode_json("p1"), *(bytes([i]) for i in range(7))])
    assert info.is_leader and info.term == 0 and info.prune_index == 6
    bc = fr.parse_broadcast([b"s", b"\x02", b"\x05", entry], b"s")
    assert bc.last_applied == 5 and bc.entries[0].index == 5


@pytest.mark.parametrize(("parse", "frames", "reason"), [
    (fr.parse_config, [b""], "1 frames where at least 2"),
    (fr.parse_config, [b"", b"\xc0", fr.encode_json([["p1"]])], "peer list"),
    (fr.parse_config, [b"", fr.encode_json(5)], "leader id 5"),
    (fr.parse_update, [b"\x01", fr.encode_json("x")], "committed index"),
    (fr.parse_entries, [b"\x07", b"", b"\x01"], "unknown status"),
    (fr.parse_entries, [b"\x03", fr.encode_json([1, 2]), b"\x01", b""], "snapshot info"),
    (fr.parse_log_info, [b"\x01", b"\xc0", b"", *[b"\x01"] * 6], "uint frame of 0"),
])
def test_bad_responses_are_typed(parse: Any, frames: list[bytes], reason: str) -> None:
    with pytest.raises(RaftProtocolError, match=reason):
        parse(frames)


def test_broadcast_of_another_cluster() -> None:
    with pytest.raises(RaftProtocolError, match="another cluster"):
        fr.parse_broadcast([b"other", b"\x01", b"\x01"], b"mine")


@given(st.integers(0, (1 << 64) - 1))
def test_uint_round_trip(n: int) -> None:
    frame = fr.encode_uint(n)
    assert fr.decode_uint(frame) == n
    assert len(frame) == max(1, (n.bit_length() + 7) // 8)
