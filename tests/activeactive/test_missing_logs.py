"""Replicas sharing a directory: a log missing after its checkpoint stops a replica in one
line instead of being written again from an older state, so does a log pruned under a
standby that fell behind, and only the checkpointing secondary (the holder of its lock)
removes what a killed checkpoint write left."""

from __future__ import annotations

import signal
from pathlib import Path

from ambrosia_ic.logstore import checkpoint_path, log_path

from ambrosia_core.wire import TakeCheckpoint
from tests.ic.conftest import Harness
from tests.launcher import wait_until

from .cluster import Cluster


def _role(harness: Harness, cl: Cluster, n: int, role: str) -> None:
    wait_until(lambda: f"following the log as the {role}" in harness.stderr_of(cl.procs[n]),
               f"replica {n} as the {role}")


def _listing(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_a_replica_refuses_a_log_missing_after_its_checkpoint(harness: Harness) -> None:
    cl = Cluster(harness, replicas=2)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    cl.start_replica(1)
    _role(harness, cl, 1, "checkpointer")
    cl.drivers[0].b.send(TakeCheckpoint())  # log 2 starts, and the checkpointer writes 2
    wait_until(checkpoint_path(cl.dir, 2).exists, "checkpoint 2")
    cl.kill9(0)
    cl.kill9(1)
    log_path(cl.dir, 2).unlink()
    before = _listing(cl.dir)
    cl.start_replica(0)
    assert cl.procs[0].wait(60) == 1
    line = (f"{log_path(cl.dir, 2)}: missing: serverchkpt2 exists, and a checkpoint is "
            "written only once its log exists; recovering without it would lose the records "
            "it held: restore it from a copy of the directory (nothing in it was changed)")
    assert line in harness.stderr_of(cl.procs[0]), harness.stderr_of(cl.procs[0])
    assert "Traceback" not in harness.stderr_of(cl.procs[0])
    assert not cl.drivers[0].primary.is_set()
    assert _listing(cl.dir) == before  # no epoch claimed, no log created


def test_only_the_checkpointer_removes_what_a_killed_checkpoint_write_left(
        harness: Harness) -> None:
    cl = Cluster(harness, replicas=3)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    stale = cl.dir / ".serverchkpt2.5eed1e55.tmp"  # a checkpointer killed while writing
    stale.write_bytes(bytes(1000))
    cl.start_replica(1)
    _role(harness, cl, 1, "checkpointer")
    wait_until(lambda: not stale.exists(), "the temporary file removed")
    assert ("removed what a checkpoint write cut short left behind: "
            ".serverchkpt2.5eed1e55.tmp (1000 bytes)") in harness.stderr_of(cl.procs[1])
    # One the live checkpointer could be writing is left alone by a standby.
    writing = cl.dir / ".serverchkpt2.0badf00d.tmp"
    writing.write_bytes(b"x")
    cl.start_replica(2)
    _role(harness, cl, 2, "standby")
    assert writing.exists()
    assert "removed what" not in harness.stderr_of(cl.procs[2])


def test_a_standby_whose_log_was_pruned_under_it_stops_in_one_line(harness: Harness) -> None:
    """A standby not scheduled while the checkpointing secondary checkpoints twice finds
    its log deleted (a later one there): it stops in one line, where it used to look for
    that log for ever (and, had it claimed the epoch, never finish taking over)."""
    cl = Cluster(harness, replicas=3)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    cl.start_replica(1)
    _role(harness, cl, 1, "checkpointer")
    cl.start_replica(2)
    _role(harness, cl, 2, "standby")
    standby = cl.procs[2]
    standby.send_signal(signal.SIGSTOP)  # it reads log 1
    try:
        for n in (2, 3, 4):
            cl.drivers[0].b.send(TakeCheckpoint())  # log n starts, and checkpoint n
            wait_until(checkpoint_path(cl.dir, n).exists, f"checkpoint {n}")
        wait_until(lambda: not log_path(cl.dir, 2).exists(), "logs 1 and 2 pruned")
    finally:
        standby.send_signal(signal.SIGCONT)
    assert standby.wait(60) == 1
    err = harness.stderr_of(standby)
    line = (f"{log_path(cl.dir, 1)}: missing: removed while this replica still had it to "
            "read (pruned: it fell further behind than the kept checkpoints reach); start it "
            "again to follow from the newest checkpoint")
    assert line in err, err
    assert "Traceback" not in err
