"""The replay sends the records the recovery plan's scan found, cut from the log by their
offsets: the same bytes, in the same order, as parsing the logs again would give."""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import pytest
from ambrosia_ic.errors import LogCorruptionError
from ambrosia_ic.logstore import LogScan, encode_disk_record, wire_batches

CID = 77


def _write_log(path: Path, first: int, n: int) -> None:
    with open(path, "wb") as f:
        for i in range(first, first + n):
            disk, _ = encode_disk_record(CID, i, b"\x04\x00\x00\x02" + bytes([i % 256]) * (i % 50),
                                         {"peer": i + 1, "other" * (i % 3): i})
            f.write(disk)


@pytest.mark.parametrize("max_bytes", [1, 100, 1 << 20])
def test_batches_hold_exactly_the_scanned_records_wire_forms(tmp_path: Path,
                                                            max_bytes: int) -> None:
    path = tmp_path / "serverlog3"
    _write_log(path, 10, 300)
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn tail: not a record, not sent
    scan = LogScan(path, first_seq=10, committer_id=CID)
    records = list(scan)
    assert scan.torn_at is not None and len(records) == 300
    batches = list(wire_batches(path, [r.offset for r in records], 10, max_bytes))
    assert b"".join(b for b, _ in batches) == b"".join(r.wire for r in records)
    assert batches[-1][1] == 309
    if max_bytes == 1:
        assert [last for _, last in batches] == list(range(10, 310))


def test_a_log_changed_since_its_scan_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    _write_log(path, 0, 5)
    offsets = [r.offset for r in LogScan(path, first_seq=0, committer_id=CID)]
    os.truncate(path, offsets[3] + 10)
    with pytest.raises(LogCorruptionError, match="record 3 changed"):
        list(wire_batches(path, offsets, 0))
    with pytest.raises(LogCorruptionError, match="record 1 changed"):
        list(wire_batches(path, offsets, 1))


def test_a_scan_reads_back_every_shape_of_watermarks(tmp_path: Path) -> None:
    """The scan reads the usual watermarks (one known sender, no trims) by a short cut."""
    shapes: list[tuple[dict[str, int], int | None]] = [
        ({"peer": 1}, None), ({"peer": 2}, None), ({}, None), ({"peer": 3, "b": 9}, None),
        ({"peer": -5}, 7), ({"é" * 40: 2**40}, None), ({"é" * 40: 3}, None), ({"peer": 4}, None),
    ]
    path = tmp_path / "serverlog1"
    with open(path, "wb") as f:
        for i, (inputs, epoch) in enumerate(shapes):
            f.write(encode_disk_record(CID, i, b"\x04\x00\x00\x02x", inputs, epoch)[0])
    got = [(r.inputs, r.epoch) for r in LogScan(path, first_seq=0, committer_id=CID)]
    assert got == [(inputs, epoch or 0) for inputs, epoch in shapes]


def _outcome_of_iterating(path: Path, **kwargs: object) -> tuple[object, ...]:
    scan = LogScan(path, **kwargs)  # type: ignore[arg-type]
    try:
        records = list(scan)
    except LogCorruptionError as err:
        return ("damage", str(err))
    inputs: dict[str, int] = {}
    for r in records:
        inputs.update(r.inputs)
    return ([r.offset for r in records], inputs, scan.torn_at, scan.good_end, scan.count,
            scan.last_seq)


def _outcome_of_spans(path: Path, **kwargs: object) -> tuple[object, ...]:
    scan = LogScan(path, **kwargs)  # type: ignore[arg-type]
    starts: array[int] = array("q")
    inputs: dict[str, int] = {}
    try:
        scan.spans(starts, inputs)
    except LogCorruptionError as err:
        return ("damage", str(err))
    return (list(starts), inputs, scan.torn_at, scan.good_end, scan.count, scan.last_seq)


def test_spans_decide_every_damaged_byte_and_cut_as_iterating_does(tmp_path: Path) -> None:
    """The plan's scan (``spans``) takes usual records by a short cut: whatever a byte
    flip or a cut does to a log, it finds the same records, watermarks, torn tail and
    error as reading every record."""
    shapes: list[tuple[dict[str, int], int | None]] = [
        ({}, None), ({"peer": 1}, None), ({"peer": 2}, None), ({"bob": 7}, None),
        ({"peer": 3}, None), ({"peer": 4, "bob": 8}, None), ({"peer": 5}, 3),
        ({"x" * 70: 9}, None), ({"x" * 70: 10}, None), ({"peer": 6}, None), ({"bob": 9}, None),
    ]
    good = bytearray()
    for i, (inputs, epoch) in enumerate(shapes):
        good += encode_disk_record(CID, 5 + i, b"\x04\x00\x00\x02" + bytes(i), inputs, epoch)[0]
    path = tmp_path / "serverlog2"
    variants = [bytes(good[:cut]) for cut in range(len(good) + 1)]
    for at in range(len(good)):
        flipped = bytearray(good)
        flipped[at] ^= 0x55
        variants.append(bytes(flipped))
    kinds = set()
    for data in variants:
        path.write_bytes(data)
        for kwargs in ({"first_seq": 5, "committer_id": CID}, {"allow_torn_tail": False}):
            want = _outcome_of_iterating(path, **kwargs)
            assert _outcome_of_spans(path, **kwargs) == want, (data.hex(), kwargs)
            kinds.add(want[0] if want[0] == "damage" else "torn" if want[2] else "whole")
    assert kinds == {"damage", "torn", "whole"}
    path.write_bytes(bytes(good))
    offsets, found, torn = _outcome_of_spans(path, first_seq=5, committer_id=CID)[:3]
    assert found == {"peer": 6, "bob": 9, "x" * 70: 10} and torn is None
    assert isinstance(offsets, list) and len(offsets) == len(shapes)
