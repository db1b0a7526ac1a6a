"""Torn tails and damaged records, in the log store and in a running coordinator."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ambrosia_ic.errors import LogCorruptionError
from ambrosia_ic.logstore import LogScan, encode_disk_record, log_path, scan_log
from ambrosia_ic.recovery import plan_recovery

from tests.launcher import wait_until

from .conftest import Harness
from .test_first_start import _run_chain

CID = 1234


def _write_log(path: Path, n: int) -> list[tuple[int, bytes]]:
    """n records; returns (offset, disk bytes) of each."""
    out, pos = [], 0
    with open(path, "wb") as f:
        for i in range(n):
            disk, _ = encode_disk_record(CID, i, b"\x04\x00\x00\x02" + bytes([i]) * 1,
                                         {"peer": i + 1})
            f.write(disk)
            out.append((pos, disk))
            pos += len(disk)
    return out


@pytest.mark.parametrize("cut", [1, 5, 23, 30])
def test_torn_tail_is_cut_at_the_last_whole_record(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "serverlog1"
    recs = _write_log(path, 4)
    os.truncate(path, path.stat().st_size - cut)
    scan = LogScan(path, first_seq=0, committer_id=CID)
    got = list(scan)
    assert [r.seq_id for r in got] == [0, 1, 2]
    assert scan.torn_at == recs[3][0] == scan.good_end
    assert got[2].inputs == {"peer": 3}


def test_zero_filled_tail_is_torn(tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    _write_log(path, 2)
    end = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(100))
    scan = LogScan(path)
    assert len(list(scan)) == 2 and scan.torn_at == end


def test_torn_tail_in_an_older_log_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    _write_log(path, 3)
    os.truncate(path, path.stat().st_size - 3)
    with pytest.raises(LogCorruptionError) as info:
        list(LogScan(path, allow_torn_tail=False))
    assert info.value.path == str(path)


def test_corrupted_middle_record_names_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    recs = _write_log(path, 4)
    data = bytearray(path.read_bytes())
    data[recs[1][0] + 26] ^= 0xFF  # a byte of record 1's body
    path.write_bytes(bytes(data))
    scan = LogScan(path)
    with pytest.raises(LogCorruptionError) as info:
        list(scan)
    assert info.value.offset == recs[1][0]
    assert str(path) in str(info.value) and f"offset {recs[1][0]}" in str(info.value)
    assert scan.count == 1  # record 0 was read; nothing after the damage was skipped to


def test_broken_length_field_in_the_middle_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    recs = _write_log(path, 3)
    data = bytearray(path.read_bytes())
    data[recs[1][0] + 4 : recs[1][0] + 8] = (5).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError) as info:
        list(LogScan(path))
    assert info.value.offset == recs[1][0]


def _first_run(harness: Harness) -> tuple[object, object]:
    harness.register("alpha")
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 4)
    harness.kill9(proc)
    d1.thread.join(30)
    return proc, d1


def test_coordinator_cuts_a_torn_final_record_and_goes_on(harness: Harness) -> None:
    _, d1 = _first_run(harness)
    path = log_path(harness.instance_dir("alpha"), 1)
    # The final record loses its tail (the file is longer: zeros written ahead).
    os.truncate(path, scan_log(path)[1].good_end - 7)
    proc = harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    replayed = d2.marks["take-becoming-primary-checkpoint"]
    assert d2.records[:replayed] == d1.records[:-1]  # type: ignore[attr-defined]
    assert "cutting a torn record off" in harness.stderr_of(proc)
    # The cut record held the acknowledgement that replay regenerates: it is logged
    # again, under the same sequence id, with the very same bytes.
    wait_until(lambda: len(d2.records) > replayed, "the regenerated call logged")
    assert d2.records[replayed] == d1.records[-1]  # type: ignore[attr-defined]
    d2.impulse(99)
    wait_until(lambda: "alpha:99" in d2.snapshot()["acked"], "new work")
    assert d2.snapshot()["acked"] == [f"alpha:{k}" for k in (0, 1, 2, 3, 99)]


def test_coordinator_stops_on_a_corrupted_middle_record(harness: Harness) -> None:
    _first_run(harness)
    idir = harness.instance_dir("alpha")
    path = log_path(idir, 1)
    reg = harness.reg("alpha")
    recs = list(LogScan(path))
    victim = recs[len(recs) // 2]
    data = bytearray(path.read_bytes())
    data[victim.offset + 25] ^= 0x55
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError):
        plan_recovery(idir, reg.committer_id)
    result = harness.cli("ic", "--instance-name", "alpha")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and f"offset {victim.offset}" in lines[0]
    assert "Traceback" not in result.stderr
    assert path.read_bytes() == bytes(data)  # left as found
    dump = harness.cli("log", "dump", "--instance-name", "alpha", "--json")
    assert dump.returncode == 1
    entries = [json.loads(x) for x in dump.stdout.splitlines()]
    problems = [e for e in entries if e["kind"] == "problem"]
    assert problems and problems[0]["offset"] == victim.offset
    seqs = [e["seq_id"] for e in entries if e["kind"] == "record"]
    assert seqs == list(range(victim.seq_id))
