"""A log a recovery needs that is gone is refused in one line naming it, and nothing in
the directory changes; what a killed checkpoint write left behind is removed by the
directory's only writer when it starts.

Checkpoint N is written only once log N exists (every flow: ``recovery.check_log_chain``),
so checkpoint N without log N, or a gap in the logs, means records were lost: recovering
from what is left would quietly go back to an older state.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ambrosia_ic import registry
from ambrosia_ic.errors import LogCorruptionError, MissingLogError
from ambrosia_ic.logstore import (
    InstanceLock,
    LogScan,
    checkpoint_path,
    encode_disk_record,
    log_path,
    write_checkpoint,
)
from ambrosia_ic.recovery import plan_recovery

from ambrosia_core.wire import Checkpoint, TakeCheckpoint
from ambrosia_py.testing import start_immortal
from tests.launcher import ROOT, wait_until

from .conftest import Harness
from .test_first_start import _run_chain

CID = 4321
BLOB = b'{"sent": [], "received": [], "acked": [], "initial": []}'
COUNTER = "samples.counter.counter:Counter"


def _checkpoint(d: Path, n: int, next_seq: int) -> None:
    inputs = {"peer": next_seq} if next_seq else {}
    write_checkpoint(d, n, {"format": 1, "next_seq": next_seq, "inputs": inputs,
                            "outputs": {}}, Checkpoint(len(BLOB)).encode(), [BLOB])


def _log(d: Path, n: int, seqs: range) -> None:
    with open(log_path(d, n), "wb") as f:
        for seq in seqs:
            disk, _ = encode_disk_record(CID, seq, b"\x04\x00\x00\x02" + bytes([seq]),
                                         {"peer": seq + 1})
            f.write(disk)


def _history(d: Path) -> Path:
    """Checkpoint 1, log 1 (records 0-2), checkpoint 2, log 2 (3-5), log 3 (6-7): as a
    standalone coordinator leaves it, checkpoint 3 not yet written."""
    d.mkdir(parents=True, exist_ok=True)
    _checkpoint(d, 1, 0)
    _log(d, 1, range(0, 3))
    _checkpoint(d, 2, 3)
    _log(d, 2, range(3, 6))
    _log(d, 3, range(6, 8))
    return d


def _missing(path: Path, why: str) -> str:
    return (f"{path}: missing: {why}; recovering without it would lose the records it "
            "held: restore it from a copy of the directory (nothing in it was changed)")


def _listing(d: Path) -> dict[str, bytes]:
    """Every file of ``d``, hidden ones too, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("gone", [(2, 3), (2, 3, 1)])
def test_a_missing_log_after_its_checkpoint_is_refused_naming_it(tmp_path: Path,
                                                                 gone: tuple[int, ...]) -> None:
    # Logs 2 and 3 gone, so no later log gives the loss away; with log 1 gone as well
    # (as when only one checkpoint is kept) checkpoint 2 is all that is left.
    d = _history(tmp_path / "i_0")
    for k in gone:
        log_path(d, k).unlink()
    with pytest.raises(MissingLogError) as info:
        plan_recovery(d, CID)
    assert str(info.value) == _missing(log_path(d, 2), "serverchkpt2 exists, and a "
                                       "checkpoint is written only once its log exists")
    assert isinstance(info.value, LogCorruptionError)  # reported as damage everywhere


def test_a_gap_in_the_log_chain_is_refused_naming_the_missing_log(tmp_path: Path) -> None:
    d = _history(tmp_path / "i_0")
    log_path(d, 2).unlink()
    with pytest.raises(MissingLogError) as info:
        plan_recovery(d, CID)
    assert str(info.value) == _missing(log_path(d, 2), "serverlog3 follows it in the log chain")


def test_a_missing_log_is_refused_even_for_a_named_older_checkpoint(tmp_path: Path) -> None:
    # ``debug-instance --checkpoint 1`` replays every log after it, log 2's records too.
    d = _history(tmp_path / "i_0")
    log_path(d, 3).unlink()
    log_path(d, 2).unlink()
    with pytest.raises(MissingLogError, match="serverlog2: missing: serverchkpt2 exists"):
        plan_recovery(d, CID, checkpoint=1)


def test_no_older_checkpoint_stands_in_for_a_damaged_one_whose_log_is_gone(
        tmp_path: Path) -> None:
    d = _history(tmp_path / "i_0")
    damaged = checkpoint_path(d, 2)
    data = bytearray(damaged.read_bytes())
    data[-3] ^= 0x01
    damaged.write_bytes(bytes(data))
    # With its logs kept, checkpoint 1 stands in and replays logs 1, 2 and 3.
    plan = plan_recovery(d, CID)
    assert plan is not None and (plan.number, plan.logs, plan.next_seq) == (1, [1, 2, 3], 8)
    # Log 2 and 3 gone: checkpoint 1 and log 1 alone would lose records 3-7.
    log_path(d, 3).unlink()
    log_path(d, 2).unlink()
    with pytest.raises(LogCorruptionError) as info:
        plan_recovery(d, CID)
    assert info.value.path == str(damaged)


@pytest.mark.parametrize("cut", ["emptied", "at a record boundary"])
def test_a_shortened_log_before_a_later_one_is_refused(tmp_path: Path, cut: str) -> None:
    # A log cut to a whole record looks like any log; the next one's first sequence id
    # gives it away.
    d = _history(tmp_path / "i_0")
    path = log_path(d, 2)
    recs = list(LogScan(path))
    os.truncate(path, 0 if cut == "emptied" else recs[1].offset)
    with pytest.raises(LogCorruptionError) as info:
        plan_recovery(d, CID)
    assert info.value.path == str(log_path(d, 3))
    assert "sequence id 6" in info.value.reason, info.value.reason


def test_an_empty_log_a_recovery_left_before_the_next_is_not_damage(tmp_path: Path) -> None:
    # A recovery created log 4 and died before a record reached it; the next one went on
    # with log 5 from the same sequence id.
    d = _history(tmp_path / "i_0")
    _checkpoint(d, 4, 8)
    log_path(d, 4).write_bytes(b"")
    _checkpoint(d, 5, 8)
    _log(d, 5, range(8, 9))
    plan = plan_recovery(d, CID)
    assert plan is not None and (plan.number, plan.logs, plan.next_seq) == (5, [5], 9)


def test_checkpoint_1_alone_is_an_interrupted_first_start_not_a_missing_log(
        tmp_path: Path) -> None:
    d = tmp_path / "i_0"
    d.mkdir()
    _checkpoint(d, 1, 0)
    plan = plan_recovery(d, CID)
    assert plan is not None and (plan.logs, plan.records) == ([], 0)


# ---------------------------------------------------------------------- real processes
def _run_with_checkpoint_2(harness: Harness) -> Path:
    """Checkpoints 1 and 2, records in logs 1 and 2, then kill -9."""
    harness.register("alpha")
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 3)
    d.b.send(TakeCheckpoint())
    idir = harness.instance_dir("alpha")
    wait_until(lambda: checkpoint_path(idir, 2).exists(), "checkpoint 2")
    _run_chain(d, 3, 6)
    harness.kill9(proc)
    d.thread.join(30)
    return idir


def test_ic_refuses_a_missing_log_in_one_line_and_changes_nothing(harness: Harness) -> None:
    idir = _run_with_checkpoint_2(harness)
    log_path(idir, 2).unlink()
    (idir / ".serverchkpt3.0123abcd.tmp").write_bytes(b"cut short")  # stays too
    before = _listing(idir)
    stored = (harness.home / "instances" / "alpha.json").read_bytes()
    r = harness.cli("ic", "--instance-name", "alpha")
    assert (r.returncode, r.stdout) == (1, "")  # no ready line: no binding got a byte
    assert r.stderr == "ambrosia: error: " + _missing(
        log_path(idir, 2), "serverchkpt2 exists, and a checkpoint is written only once its "
        "log exists") + "\n"
    assert _listing(idir) == before  # nothing pruned, created, cut or removed
    assert (harness.home / "instances" / "alpha.json").read_bytes() == stored


def test_ambrosia_run_refuses_a_missing_log_after_kill9(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = start_immortal(COUNTER, "counter", home=home, cwd=ROOT)
    first.wait_for("count is 1")
    assert first.stop() == 0
    second = start_immortal(COUNTER, "counter", home=home, cwd=ROOT)  # a recovery
    second.wait_for("count is 1 on becoming primary")
    idir = registry.instance_dir(registry.load("counter", home))
    wait_until(checkpoint_path(idir, 2).exists, "checkpoint 2")
    second.kill()  # kill -9 of the immortal and its coordinator
    log_path(idir, 2).unlink()
    before = _listing(idir)
    stored = {p.name: p.read_bytes() for p in (home / "instances").iterdir()}
    third = start_immortal(COUNTER, "counter", home=home, cwd=ROOT, primary=False)
    try:
        code = third.wait(60)
    finally:
        third.kill()
    assert code == 1, third.last_lines()
    assert third.lines[-1] == (
        "ambrosia run: error: the coordinator of counter did not start: " + _missing(
            log_path(idir, 2), "serverchkpt2 exists, and a checkpoint is written only once "
            "its log exists"))
    assert not any("recovery complete" in line for line in third.lines), third.lines
    assert _listing(idir) == before
    assert {p.name: p.read_bytes() for p in (home / "instances").iterdir()} == stored


def test_stale_checkpoint_temps_go_only_once_the_lock_is_held(harness: Harness) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 2)
    harness.kill9(proc)
    d.thread.join(30)
    idir = harness.instance_dir("alpha")
    # What a kill -9 in the middle of writing checkpoint 2 leaves.
    stale = idir / ".serverchkpt2.5eed1e55.tmp"
    stale.write_bytes(bytes(1000))
    lock = InstanceLock(idir)  # as if another coordinator were running here
    lock.acquire()
    try:
        r = harness.cli("ic", "--instance-name", "alpha")
    finally:
        lock.release()
    assert r.returncode == 1 and "another coordinator holds the log lock" in r.stderr
    assert stale.exists()
    proc2 = harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    assert not stale.exists()
    # Said once the removal (in a worker thread) returns: maybe just after the test saw
    # the file gone.
    said = ("ambrosia-ic: alpha: removed what a checkpoint write cut short left behind: "
            ".serverchkpt2.5eed1e55.tmp (1000 bytes)")
    wait_until(lambda: said in harness.stderr_of(proc2).splitlines(), "the removal said")
    # And when the next checkpoint lets older files go (one left while it ran).
    _run_chain(d2, 2, 3)  # live: the recovery's checkpoint 2 and its pruning are done
    late = idir / ".serverchkpt1.0badf00d.tmp"
    late.write_bytes(b"x")
    d2.b.send(TakeCheckpoint())
    _run_chain(d2, 3, 4)
    wait_until(lambda: checkpoint_path(idir, 3).exists() and not late.exists(),
               "checkpoint 3, and the temporary file gone")
    assert sorted(p.name for p in idir.iterdir() if p.name.endswith(".tmp")) == []

