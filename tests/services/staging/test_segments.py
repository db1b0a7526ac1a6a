"""Staged segments: the exact bytes of a block, what reads back, and every way a block can
be wrong named in one line (missing, cut short, damaged, another block, a full root)."""

from __future__ import annotations

import itertools
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash
from ambrosia_services.staging import (
    MAGIC,
    Ref,
    SegmentDamagedError,
    SegmentMissingError,
    SegmentWriter,
    StagingFullError,
    count_lines,
    encode_block,
    read_block,
    read_payloads,
    segment_names,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def test_a_block_has_the_documented_bytes() -> None:
    block, check, size = encode_block(7, 10, 11, [b"ab\n", b"c\n"])
    body = (b"BLK1" + (2).to_bytes(4, "little") + (7).to_bytes(8, "little")
            + (10).to_bytes(8, "little") + (11).to_bytes(8, "little")
            + (5).to_bytes(8, "little")
            + b"".join(n.to_bytes(4, "little") for n in (0, 3, 5)) + b"ab\nc\n")
    assert block == body + xxhash.xxh64_intdigest(body).to_bytes(8, "little")
    assert check == xxhash.xxh64_intdigest(body)
    assert size == 5


def test_a_block_with_ids_and_keys_has_the_documented_bytes() -> None:
    block, check, size = encode_block(7, 10, 12, [b"ab\n", b"c\n"], [10, 12], [b"k", b""])
    body = (b"BLK2" + (2).to_bytes(4, "little") + (7).to_bytes(8, "little")
            + (10).to_bytes(8, "little") + (12).to_bytes(8, "little")
            + (5).to_bytes(8, "little")
            + b"".join(n.to_bytes(4, "little") for n in (0, 3, 5)) + b"ab\nc\n"
            + (10).to_bytes(8, "little") + (12).to_bytes(8, "little")
            + b"".join(n.to_bytes(4, "little") for n in (0, 1, 1)) + b"k")
    assert block == body + xxhash.xxh64_intdigest(body).to_bytes(8, "little")
    assert (check, size) == (xxhash.xxh64_intdigest(body), 5)
    for ids, keys in (([10, 11, 12], None), ([11, 12], None), ([10, 10], None),
                      ([10, 12], [b"k"])):
        with pytest.raises(ValueError):
            encode_block(7, 10, 12, [b"ab\n", b"c\n"], ids, keys)


def test_a_segment_starts_with_its_magic_and_refs_name_blocks(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "life")
    r1 = w.append(1, 0, 2, [b"x\n", b"yy\n", b"zzz\n"])
    r2 = w.append(2, 5, 5, [b"only\n"])
    w.sync()
    raw = (tmp_path / "life-1.seg").read_bytes()
    assert raw.startswith(MAGIC)
    assert (r1.offset, r2.offset) == (len(MAGIC), len(MAGIC) + r1.length)
    assert raw[r2.offset:r2.offset + r2.length] == encode_block(2, 5, 5, [b"only\n"])[0]
    assert r1 == Ref(1, 0, 2, 3, 9, "life-1.seg", len(MAGIC), r1.length, r1.check, 3)
    assert Ref.from_list(r1.to_list()) == r1
    assert read_payloads(tmp_path, [r2, r1]) == [b"only\n", b"x\n", b"yy\n", b"zzz\n"]
    assert segment_names(tmp_path) == ["life-1.seg"]


def test_lines_are_counted_at_line_ends_and_a_last_line_without_one() -> None:
    assert count_lines([b"a\nb\n", b"c", b"", b"\n", b"d\ne"]) == 2 + 1 + 0 + 1 + 2


def test_segments_roll_at_their_size(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "L", segment_bytes=100)
    refs = [w.append(1, i, i, [b"p" * 60]) for i in range(3)]
    w.sync()
    assert [r.segment for r in refs] == ["L-1.seg", "L-2.seg", "L-3.seg"]
    assert w.written == ["L-1.seg", "L-2.seg", "L-3.seg"]
    assert read_payloads(tmp_path, refs) == [b"p" * 60] * 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=20), min_size=1,
                max_size=8),
       st.integers(min_value=0, max_value=(1 << 64) - 100))
def test_whatever_is_appended_reads_back(tmp_path_factory: pytest.TempPathFactory,
                                         runs: list[list[bytes]], first: int) -> None:
    root = tmp_path_factory.mktemp("seg")
    w = SegmentWriter(root, "h", segment_bytes=300)
    refs = []
    for k, run in enumerate(runs):
        refs.append(w.append(k, first, first + len(run) - 1, run))
    w.sync()
    for ref, run in zip(refs, runs, strict=True):
        block = read_block(root, ref)
        assert block.payloads() == run
        assert bytes(block.data) == b"".join(run)
        with pytest.raises(ValueError, match="no message ids"):
            block.messages()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 1000), st.binary(max_size=12),
                                   st.binary(max_size=40)), min_size=1, max_size=20),
                min_size=1, max_size=8),
       st.integers(min_value=0, max_value=(1 << 63)))
def test_messages_with_ids_and_keys_read_back(tmp_path_factory: pytest.TempPathFactory,
                                              runs: list[list[tuple[int, bytes, bytes]]],
                                              first: int) -> None:
    root = tmp_path_factory.mktemp("seg2")
    w = SegmentWriter(root, "h", segment_bytes=300)
    written = []
    for k, run in enumerate(runs):
        ids = list(itertools.accumulate((gap for gap, _, _ in run), initial=first))[1:]
        messages = [(i, key, data) for i, (_, key, data) in zip(ids, run, strict=True)]
        ref = w.append(k, ids[0], ids[-1], [m[2] for m in messages], ids,
                       [m[1] for m in messages])
        written.append((ref, messages))
    w.sync()
    for ref, messages in written:
        block = read_block(root, ref)
        assert block.messages() == messages
        assert block.payloads() == [m[2] for m in messages]  # the bytes alone, as BLK1
        assert bytes(block.data) == b"".join(m[2] for m in messages)


def _one(tmp_path: Path) -> tuple[Ref, Path]:
    w = SegmentWriter(tmp_path, "d")
    w.append(1, 0, 0, [b"before\n"])
    ref = w.append(1, 1, 2, [b"hello\n", b"world\n"])
    w.append(1, 3, 3, [b"after\n"])
    w.sync()
    return ref, tmp_path / ref.segment


def test_every_flipped_byte_of_a_block_is_found(tmp_path: Path) -> None:
    ref, path = _one(tmp_path)
    good = path.read_bytes()
    for i in range(ref.offset, ref.offset + ref.length):
        bad = bytearray(good)
        bad[i] ^= 0x40
        path.write_bytes(bad)
        with pytest.raises(SegmentDamagedError, match=f"{path}, block at {ref.offset}"):
            read_block(tmp_path, ref)
    path.write_bytes(good)
    assert read_block(tmp_path, ref).payloads() == [b"hello\n", b"world\n"]


def _resealed(path: Path, ref: Ref, at: int, data: bytes) -> Ref:
    """``ref``'s block with ``data`` written at ``at`` (from the block's start) and a
    check that matches again: wrong inside, as only a bug makes a block."""
    raw = bytearray(path.read_bytes())
    raw[ref.offset + at:ref.offset + at + len(data)] = data
    end = ref.offset + ref.length
    check = xxhash.xxh64_intdigest(bytes(raw[ref.offset:end - 8]))
    raw[end - 8:end] = struct.pack("<Q", check)
    path.write_bytes(raw)
    return Ref(ref.stream_id, ref.first_id, ref.last_id, ref.count, ref.size, ref.segment,
               ref.offset, ref.length, check, ref.lines)


def test_offsets_ids_and_key_offsets_out_of_order_are_damage(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "o", segment_bytes=1)  # a segment per block
    payloads, ids, keys = [b"a\n", b"bc\n", b"d\n"], [4, 5, 9], [b"x", b"", b"yz"]
    refs = [w.append(1, 4, 9, payloads, ids, keys) for _ in range(3)]
    w.sync()
    header, count = 40, 3
    data_end = header + 4 * (count + 1) + 6
    cases = [
        (refs[0], header + 8, struct.pack("<I", 1), "record offsets are out of order"),
        (refs[1], data_end + 8, struct.pack("<Q", 3), "message ids are out of order"),
        (refs[2], data_end + 8 * count + 4, struct.pack("<I", 2), "lengths do not add up"),
    ]
    for ref, at, data, why in cases:
        assert read_block(tmp_path, ref).messages() == list(zip(ids, keys, payloads,
                                                               strict=True))
        bad = _resealed(tmp_path / ref.segment, ref, at, data)
        with pytest.raises(SegmentDamagedError, match=why):
            read_block(tmp_path, bad)


def test_a_cut_short_segment_a_missing_one_and_a_wrong_ref_are_named(tmp_path: Path) -> None:
    ref, path = _one(tmp_path)
    other = Ref(ref.stream_id, ref.first_id, ref.last_id + 1, ref.count, ref.size,
                ref.segment, ref.offset, ref.length, ref.check)
    with pytest.raises(SegmentDamagedError, match="another block than the reference"):
        read_block(tmp_path, other)
    moved = Ref(*[*ref.to_list()[:6], ref.offset + 1, ref.length, ref.check])  # type: ignore[arg-type]
    assert Ref.from_list(ref.to_list()[:9]).lines == 0  # a reference logged before lines
    with pytest.raises(SegmentDamagedError, match="damaged"):
        read_block(tmp_path, moved)
    with open(path, "r+b") as f:
        f.truncate(ref.offset + ref.length - 3)
    with pytest.raises(SegmentDamagedError, match=f"cut short \\({ref.length - 3} of "):
        read_block(tmp_path, ref)
    path.unlink()
    with pytest.raises(SegmentMissingError, match=f"{path} is missing .* messages 1..2"):
        read_block(tmp_path, ref)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB file system of its own (tmpfs, mounted by the test as root)."""
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_root_is_said_and_what_was_synced_stays_readable(small_disk: Path) -> None:
    w = SegmentWriter(small_disk, "f", segment_bytes=256 << 10)
    kept = w.append(1, 0, 0, [b"k" * 1000])
    w.sync()
    with pytest.raises(StagingFullError, match=f"the staging root {small_disk} is full"):
        for i in range(1, 10_000):
            w.append(1, i, i, [b"z" * 4096])
    assert read_block(small_disk, kept).payloads() == [b"k" * 1000]
    for name in segment_names(small_disk)[1:]:
        (small_disk / name).unlink()
    after = w.append(2, 0, 0, [b"room again\n"])  # a new segment, not the failed one's tail
    w.sync()
    assert after.segment not in ("f-1.seg",) and after.offset == len(MAGIC)
    assert read_block(small_disk, after).payloads() == [b"room again\n"]
