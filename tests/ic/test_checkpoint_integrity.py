"""Checkpoint files carry check bytes: damage anywhere is reported in one line naming the
file before a byte reaches a binding, and a recovery falls back to an older kept
checkpoint and its logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xxhash
from ambrosia_ic.errors import LogCorruptionError
from ambrosia_ic.logstore import CheckpointFile, checkpoint_path, write_checkpoint

from ambrosia_core.errors import CoordinatorError
from ambrosia_core.wire import Checkpoint, TakeCheckpoint
from tests.launcher import wait_until

from .conftest import Harness
from .test_first_start import _run_chain

STATE = {"format": 1, "next_seq": 0, "inputs": {}, "outputs": {}}
BLOB = b'{"sent": [], "received": [], "acked": [], "initial": []}'


def _write(d: Path) -> Path:
    return write_checkpoint(d, 1, STATE, Checkpoint(len(BLOB)).encode(), [BLOB[:10], BLOB[10:]])


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_check_bytes_are_xxh64_of_everything_before_them(tmp_path: Path) -> None:
    path = _write(tmp_path)
    data = path.read_bytes()
    assert data[:8] == b"AMBRCKP2"
    assert data[-8:] == xxhash.xxh64_intdigest(data[:-8]).to_bytes(8, "little")
    cf = CheckpointFile(path)
    assert cf.state == STATE and cf.size == len(BLOB)
    assert b"".join(cf.chunks()) == BLOB
    assert data[cf.raw_offset : cf.raw_offset + cf.size] == BLOB


def _positions(path: Path) -> dict[str, int]:
    cf = CheckpointFile(path)
    size = path.stat().st_size
    state_at = 12
    message_at = cf.raw_offset - len(cf.message)
    return {"state length": 8, "state": state_at + 3, "binding message": message_at + 1,
            "raw bytes": cf.raw_offset + 5, "check bytes": size - 2}


@pytest.mark.parametrize("part", ["state length", "state", "binding message", "raw bytes",
                                  "check bytes"])
def test_one_flipped_byte_anywhere_is_reported_naming_the_file(tmp_path: Path,
                                                               part: str) -> None:
    path = _write(tmp_path)
    size = path.stat().st_size
    _flip(path, _positions(path)[part])
    with pytest.raises(LogCorruptionError) as info:
        CheckpointFile(path)
    assert str(info.value) == (f"{path}: damaged at offset {size - 8}: check bytes do not "
                               "match the checkpoint's content")


def test_a_checkpoint_without_check_bytes_is_refused_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path)
    path.write_bytes(b"AMBRCKP1" + path.read_bytes()[8:-8])  # the previous format
    with pytest.raises(CoordinatorError) as info:
        CheckpointFile(path)
    assert str(info.value) == (
        f"{path}: a checkpoint in the format before check bytes (AMBRCKP1), which this "
        "version does not read; start the instance afresh in a new log directory")


def _run_one_checkpoint(harness: Harness, **kw: object):  # type: ignore[no-untyped-def]
    harness.register("alpha", **kw)
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 4)
    harness.kill9(proc)
    d1.thread.join(30)
    return d1


@pytest.mark.parametrize("part", ["state", "binding message", "raw bytes", "check bytes"])
def test_a_damaged_only_checkpoint_stops_the_start_in_one_line(harness: Harness,
                                                                part: str) -> None:
    _run_one_checkpoint(harness)
    path = checkpoint_path(harness.instance_dir("alpha"), 1)
    size = path.stat().st_size
    _flip(path, _positions(path)[part])
    r = harness.cli("ic", "--instance-name", "alpha")
    assert r.returncode == 1
    assert r.stderr == (f"ambrosia: error: {path}: damaged at offset {size - 8}: check bytes "
                        "do not match the checkpoint's content\n")
    assert "ambrosia-ic ready" not in r.stdout  # no binding was served a byte of it
    dump = harness.cli("log", "dump", "--instance-name", "alpha", "--json")
    assert dump.returncode == 1
    problems = [e for e in map(json.loads, dump.stdout.splitlines()) if e["kind"] == "problem"]
    assert problems == [{"kind": "problem", "file": str(path), "offset": size - 8,
                         "reason": "check bytes do not match the checkpoint's content"}]
    text = harness.cli("log", "dump", "--instance-name", "alpha")
    assert text.returncode == 1
    assert (f"PROBLEM {path} at offset {size - 8}: check bytes do not match the checkpoint's "
            "content") in text.stdout.splitlines()


def test_recovery_falls_back_to_the_older_kept_checkpoint_and_its_logs(
    harness: Harness,
) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 3)
    d1.b.send(TakeCheckpoint())
    idir = harness.instance_dir("alpha")
    wait_until(lambda: checkpoint_path(idir, 2).exists(), "checkpoint 2")
    _run_chain(d1, 3, 6)
    before = d1.snapshot()
    harness.kill9(proc)
    d1.thread.join(30)
    damaged = checkpoint_path(idir, 2)
    size = damaged.stat().st_size
    intact = CheckpointFile(damaged)
    _flip(damaged, _positions(damaged)["raw bytes"])
    bad_blob = damaged.read_bytes()[intact.raw_offset : intact.raw_offset + intact.size]
    blob1 = b"".join(CheckpointFile(checkpoint_path(idir, 1)).chunks())

    proc2 = harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after the fallback")
    assert d2.events == ["checkpoint-loaded", "take-becoming-primary-checkpoint"]
    # The binding got checkpoint 1's state, never the damaged one, then logs 1 and 2.
    assert blob1 in bytes(d2.b.received)
    assert bad_blob not in bytes(d2.b.received)
    assert d2.records == d1.records
    assert d2.snapshot() == before
    lines = harness.stderr_of(proc2).splitlines()
    assert lines == [f"ambrosia-ic: alpha: {damaged}: damaged at offset {size - 8}: check bytes "
                     "do not match the checkpoint's content; recovering from checkpoint 1 and "
                     "its logs instead"]
    _run_chain(d2, 6, 8)
    assert d2.snapshot()["acked"] == [f"alpha:{k}" for k in range(8)]
    # The damaged checkpoint does not count as kept: checkpoint 1 stays with checkpoint 3.
    wait_until(lambda: checkpoint_path(idir, 3).exists(), "checkpoint 3")
    names = sorted(p.name for p in idir.iterdir() if p.name.startswith("serverchkpt"))
    assert names == ["serverchkpt1", "serverchkpt2", "serverchkpt3"]


def test_a_checkpoint_in_the_previous_format_is_refused_by_ic_and_reported_by_dump(
    harness: Harness,
) -> None:
    _run_one_checkpoint(harness)
    path = checkpoint_path(harness.instance_dir("alpha"), 1)
    path.write_bytes(b"AMBRCKP1" + path.read_bytes()[8:-8])
    reason = ("a checkpoint in the format before check bytes (AMBRCKP1), which this version "
              "does not read; start the instance afresh in a new log directory")
    r = harness.cli("ic", "--instance-name", "alpha")
    assert r.returncode == 1
    assert r.stderr == f"ambrosia: error: {path}: {reason}\n"
    dump = harness.cli("log", "dump", "--instance-name", "alpha", "--json")
    assert dump.returncode == 1
    problems = [e for e in map(json.loads, dump.stdout.splitlines()) if e["kind"] == "problem"]
    assert problems == [{"kind": "problem", "file": str(path), "offset": 0, "reason": reason}]


def test_a_log_whose_checkpoint_is_missing_is_refused_and_left_alone(harness: Harness) -> None:
    _run_one_checkpoint(harness)
    idir = harness.instance_dir("alpha")
    checkpoint_path(idir, 1).unlink()
    log = (idir / "serverlog1").read_bytes()
    r = harness.cli("ic", "--instance-name", "alpha")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"ambrosia: error: {idir}: serverlog1 exists but no checkpoint, so its "
                        "records cannot be recovered; restore the checkpoint, or move the "
                        "directory away to start afresh\n")
    assert (idir / "serverlog1").read_bytes() == log  # not overwritten by a first start
