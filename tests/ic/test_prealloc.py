"""Log files written in place: the writer keeps zeros written and synced ahead of its
end and writes records into them; every reader takes the zero tail for space not written
yet, and a write cut short over the zeros for a torn tail, never for a record or damage."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
from ambrosia_ic.errors import LogCorruptionError
from ambrosia_ic.logstore import (
    LogScan,
    LogWriter,
    encode_disk_record,
    log_path,
    scan_log,
    write_checkpoint,
    written_end,
)
from ambrosia_ic.recovery import coordinator_state, plan_recovery

from ambrosia_core.wire import Checkpoint, TakeCheckpoint
from tests.launcher import wait_until

from .conftest import Harness
from .test_first_start import _run_chain

CID = 77


def _record(seq: int, size: int = 40, inputs: dict[str, int] | None = None,
            epoch: int | None = None) -> bytes:
    body = b"\x04\x00\x00\x02" + bytes([seq % 251 + 1]) * size
    return encode_disk_record(CID, seq, body, inputs or {"alpha": seq + 1}, epoch)[0]


def test_records_cross_extensions_and_read_back_while_live_and_after_close(
        tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    w = LogWriter(path, region=256)
    written = []
    for seq in range(30):
        # Some records are larger than the region itself.
        data = _record(seq, 700 if seq % 7 == 3 else 20 + seq)
        w.write(data)
        w.sync()
        written.append(data)
        assert w.size == sum(map(len, written))
        assert path.stat().st_size > w.size  # zeros ahead, at least one byte
        recs, scan = scan_log(path, committer_id=CID, first_seq=0)
        assert [r.seq_id for r in recs] == list(range(seq + 1))
        assert (scan.torn_at, scan.zero_tail, scan.good_end) == (w.size, True, w.size)
    assert path.read_bytes()[: w.size] == b"".join(written)
    w.close()
    assert path.stat().st_size == w.size  # closing cut the zeros off
    recs, scan = scan_log(path, allow_torn_tail=False, first_seq=0)
    assert len(recs) == 30 and scan.torn_at is None and not scan.zero_tail


def test_appends_without_a_region(tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    w = LogWriter(path)
    w.write(_record(0))
    w.sync()
    assert path.stat().st_size == w.size == len(_record(0))
    w.close()


def test_a_crash_image_is_cut_at_the_logical_end(tmp_path: Path) -> None:
    path = tmp_path / "serverlog1"
    w = LogWriter(path, region=4096)
    for seq in range(5):
        w.write(_record(seq))
    w.sync()
    crash = tmp_path / "serverlog2"
    crash.write_bytes(path.read_bytes())  # what a kill -9 leaves: the zeros stay
    w.close()
    assert written_end(crash) <= w.size < crash.stat().st_size
    _, scan = scan_log(crash)
    assert scan.torn_at == w.size and scan.zero_tail
    LogWriter(crash, truncate_at=scan.torn_at).close()
    assert crash.read_bytes() == path.read_bytes()


@pytest.mark.parametrize(("inputs", "epoch"), [
    ({"alpha": 300, "beta": 70_000}, None),  # a standalone coordinator's record
    ({"alpha": 300, "beta": 5}, 3),  # an active/active primary's, with its epoch
])
def test_a_record_cut_short_over_zeros_is_torn_or_whole_never_wrong(
        tmp_path: Path, inputs: dict[str, int], epoch: int | None) -> None:
    """Every prefix of the last record, followed by the zeros the writer had written
    there (a kill -9 inside a write, or a reader looking during one): the scan gives
    the records before it and a torn tail, or the record as written (when what is
    missing was zeros anyway); never a record with other watermarks, never damage."""
    first = {k: v - 1 for k, v in inputs.items()}
    head = _record(0, inputs=first, epoch=epoch) + _record(1, inputs=first, epoch=epoch)
    last = _record(2, size=30, inputs=inputs, epoch=epoch)
    whole = scan_log(_file(tmp_path / "whole", head + last + bytes(64)))[0][-1]
    for cut in range(1, len(last)):
        path = _file(tmp_path / f"cut{cut}", head + last[:cut] + bytes(64 + len(last) - cut))
        recs, scan = scan_log(path, committer_id=CID, first_seq=0)
        if len(recs) == 3:
            assert recs[2] == whole, cut
            assert scan.zero_tail
        else:
            assert len(recs) == 2 and scan.torn_at == len(head), cut
        starts: array[int] = array("q")
        known = dict(first)
        spans = LogScan(path, committer_id=CID, first_seq=0)
        spans.spans(starts, known)
        assert (spans.count, spans.torn_at) == (len(recs), scan.torn_at), cut
        assert known == (recs[-1].inputs if len(recs) == 3 else first), cut
        if epoch is not None:
            assert all(r.epoch == epoch for r in recs)
        # A follower's look starting at the record has nothing before it to compare
        # with: only the marks of a cut show. What they cannot (no watermarks at all,
        # no epoch) a follower drops for its epoch of 0.
        alone, _ = scan_log(path, committer_id=CID, first_seq=2, start=len(head))
        for r in alone:
            assert r == whole or (r.epoch == 0 and r.inputs in ({}, whole.inputs)
                                  and r.wire == whole.wire), cut


def _file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_zeroed_record_inside_a_live_log_is_still_damage(tmp_path: Path) -> None:
    recs = [_record(seq) for seq in range(4)]
    data = bytearray(b"".join(recs) + bytes(200))
    at = len(recs[0])
    data[at : at + len(recs[1])] = bytes(len(recs[1]))  # record 1 gone, 2 and 3 follow
    with pytest.raises(LogCorruptionError) as info:
        scan_log(_file(tmp_path / "serverlog1", bytes(data)))
    assert info.value.offset == at


def _checkpoint(d: Path) -> None:
    write_checkpoint(d, 1, coordinator_state(0, {}, {}), Checkpoint(5).encode(), [b"state"])


@pytest.mark.parametrize("newest", ["none", "empty", "zeros", "records"])
def test_an_older_log_ending_in_zeros_is_read_whole(tmp_path: Path, newest: str) -> None:
    """What a crash at each step of a log switch leaves when the older log was not cut
    (an active/active primary never cuts it): its zero tail is its end, not damage."""
    _checkpoint(tmp_path)
    _file(log_path(tmp_path, 1), b"".join(_record(s) for s in range(5)) + bytes(300))
    if newest != "none":
        tail = {"empty": b"", "zeros": bytes(4096),
                "records": _record(5) + _record(6) + bytes(100)}[newest]
        _file(log_path(tmp_path, 2), tail)
    plan = plan_recovery(tmp_path, CID)
    assert plan is not None
    expect = 7 if newest == "records" else 5
    assert (plan.records, plan.next_seq, plan.inputs) == (expect, expect, {"alpha": expect})
    if newest in ("none", "zeros", "records"):
        assert plan.torn is not None and plan.torn_zeros
    _, scan = scan_log(log_path(tmp_path, 1), allow_torn_tail=False)
    assert scan.zero_tail and scan.torn_at is None


def test_a_torn_record_in_an_older_log_is_still_damage(tmp_path: Path) -> None:
    _checkpoint(tmp_path)
    cut = _record(4)[:30]
    _file(log_path(tmp_path, 1), b"".join(_record(s) for s in range(4)) + cut + bytes(300))
    _file(log_path(tmp_path, 2), _record(4))
    with pytest.raises(LogCorruptionError, match="incomplete record at the end of a closed"):
        plan_recovery(tmp_path, CID)


def test_a_region_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a log region of -1 bytes"):
        LogWriter(tmp_path / "serverlog1", region=-1)
    assert not (tmp_path / "serverlog1").exists()


def test_kill9_with_records_in_the_zeros_then_recovery_and_a_live_dump(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A coordinator writing 4 KiB ahead: a log switch leaves the older log cut at its
    last record, a dump of the live log shows its records, a kill -9 leaves zeros past
    the end, and the recovery replays exactly what was logged and cuts them."""
    monkeypatch.setenv("AMBROSIA_IC_PREALLOC", "4")
    harness.register("alpha")
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 30)  # 5 KiB of records or so: the region is extended
    idir = harness.instance_dir("alpha")
    d1.b.send(TakeCheckpoint())
    wait_until(lambda: (idir / "serverchkpt2").exists(), "checkpoint 2")
    log1, log2 = log_path(idir, 1), log_path(idir, 2)
    assert log1.stat().st_size == scan_log(log1, allow_torn_tail=False)[1].good_end > 4096
    _run_chain(d1, 30, 45)
    live, scan = scan_log(log2)
    assert scan.zero_tail and log2.stat().st_size > scan.good_end
    r = harness.cli("log", "dump", "-i", "alpha")
    assert r.returncode == 0, r.stderr
    seqs = [int(ln.split()[1]) for ln in r.stdout.splitlines() if ln.startswith("  seq ")]
    assert seqs[-len(live):] == [rec.seq_id for rec in live]
    assert "torn" not in r.stdout
    before = d1.snapshot()
    harness.kill9(proc)
    d1.thread.join(30)
    assert log2.stat().st_size > scan_log(log2)[1].good_end  # the zeros stay

    proc = harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    assert d2.snapshot() == before
    assert d2.records == d1.records[d1.marks["take-checkpoint"]:]
    assert "cutting a torn record" not in harness.stderr_of(proc)  # zeros are no news
    assert log2.stat().st_size == scan_log(log2, allow_torn_tail=False)[1].good_end
    _run_chain(d2, 45, 47)
    after = d2.snapshot()
    assert after["sent"] == [f"alpha:{k}" for k in range(47)] == after["acked"]


_TRIMMED_UNDER_A_READER = '''
import mmap, sys
from array import array
from pathlib import Path
from ambrosia_ic.logstore import LogScan, LogWriter, records

path, how = Path(sys.argv[1]), sys.argv[2]
real = mmap.mmap

def map_then_trim(fd, length, *a, **kw):
    m = real(fd, length, *a, **kw)
    WRITER.close()  # the writer cuts its zero tail off right after the reader mapped it
    return m

WRITER = LogWriter(path, region=1 << 20)
for seq in range(50):
    WRITER.write(RECORDS[seq])
WRITER.sync()
records.mmap.mmap = map_then_trim
scan = LogScan(path, committer_id=CID, first_seq=0)
if how == "iterate":
    got = [r.seq_id for r in scan]
else:
    starts = array("q")
    scan.spans(starts, {})
    got = list(range(scan.count))
print(len(got), scan.good_end, path.stat().st_size)
'''


@pytest.mark.parametrize("how", ["iterate", "spans"])
def test_a_reader_survives_the_zero_tail_cut_off_under_it(tmp_path: Path, how: str) -> None:
    """The writer trims its zeros when it closes a log or moves on; a reader that had the
    file mapped (``ambrosia log dump`` of a live log, a recovery plan) must not touch a
    page past the new end (a SIGBUS ends it with no word)."""
    import subprocess
    import sys

    recs = [_record(seq) for seq in range(50)]
    script = (f"CID = {CID}\nRECORDS = {recs!r}\n" + _TRIMMED_UNDER_A_READER)
    path = tmp_path / "serverlog1"
    out = subprocess.run([sys.executable, "-c", script, str(path), how], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    size = sum(map(len, recs))
    assert out.stdout.split() == ["50", str(size), str(size)]
