"""Fencing of a paused primary, and the checkpointing secondary's work and replacement."""

from __future__ import annotations

import signal

from ambrosia_ic.logstore import file_numbers, log_path, read_seal

from ambrosia_core.wire import TakeCheckpoint
from tests.ic.conftest import Harness
from tests.launcher import wait_until

from .cluster import Cluster


def _three(harness: Harness) -> Cluster:
    cl = Cluster(harness)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    cl.start_replica(1)
    cl.start_replica(2)
    cl.start_client()
    return cl


def test_a_primary_paused_past_its_lease_is_fenced_and_never_writes_again(
    harness: Harness,
) -> None:
    cl = _three(harness)
    cl.start_pump()
    cl.wait(lambda: len(cl.received_by(0)) >= 20, "calls flowing", 120)
    old = cl.procs[0]
    old.send_signal(signal.SIGSTOP)
    try:
        new = cl.wait_primary(not_=0)
        assert new == 2  # the standby, never the checkpointer
        sealed = file_numbers(cl.dir, "serverlog")[-2]
        seal = read_seal(cl.dir, sealed)
        assert seal is not None
        before = log_path(cl.dir, sealed).read_bytes()[:seal]
        at = len(cl.received_by(2))
        wait_until(lambda: len(cl.received_by(2)) > at + 10, "the new primary working")
    finally:
        old.send_signal(signal.SIGCONT)
    # Woken up, the old primary finds a newer epoch, writes nothing and rejoins as a
    # standby in the same process (this test's binding does not start over).
    cl.wait(lambda: "fenced by epoch 2, rejoining as a standby" in harness.stderr_of(old),
            "the old primary rejoining")
    assert old.poll() is None
    err = harness.stderr_of(old)
    assert err.count("LockLostError") == 0  # one clear line, no traceback
    assert "Traceback" not in err
    assert log_path(cl.dir, sealed).read_bytes()[:seal] == before
    wait_until(lambda: len(cl.received_by(2)) > at + 20, "still working after the wake-up")
    cl.stop_pump()
    cl.check_exactly_once(2)
    # The paused primary delivered nothing past the seal to its binding either.
    assert cl.received_by(0) == cl.received_by(2)[: len(cl.received_by(0))]


def test_the_checkpointing_secondary_checkpoints_and_is_replaced_after_kill9(
    harness: Harness,
) -> None:
    cl = _three(harness)
    cl.start_pump()
    wait_until(lambda: len(cl.received_by(0)) >= 10, "calls flowing")
    cl.drivers[0].b.send(TakeCheckpoint())  # the primary's binding asks: the log rolls
    wait_until(lambda: (cl.dir / "serverchkpt2").exists(), "checkpoint 2 by the checkpointer")
    assert "take-checkpoint" in cl.drivers[1].events
    assert "take-checkpoint" not in cl.drivers[0].events  # the primary never pauses
    cl.kill9(1)
    cl.drivers[0].b.send(TakeCheckpoint())  # log 3 starts; nobody checkpoints it yet
    wait_until(lambda: (cl.dir / "serverlog3").exists(), "log 3")
    cl.start_replica(1)  # the next replica started takes the role
    wait_until(lambda: "following the log as the checkpointer" in
               harness.stderr_of(cl.procs[1]), "replica 1 checkpointer again")
    wait_until(lambda: (cl.dir / "serverchkpt3").exists(), "checkpoint 3 by the new one")
    cl.drivers[0].b.send(TakeCheckpoint())
    wait_until(lambda: (cl.dir / "serverchkpt4").exists(), "checkpoint 4")
    wait_until(lambda: not (cl.dir / "serverchkpt2").exists(), "older files removed")
    assert (cl.dir / "serverchkpt3").exists()  # the previous one stays for slow readers
    cl.stop_pump()
    calls = cl.check_exactly_once(0)
    wait_until(lambda: cl.received_by(1) == calls, "checkpointer caught up")
    # A standby started now recovers from the checkpointer's checkpoint.
    harness.add_replica("S", 3)
    cl.start_replica(3)
    wait_until(lambda: cl.received_by(3) == calls, "new standby caught up")
    assert cl.drivers[3].events[0] == "checkpoint-loaded"


def test_the_checkpointing_secondary_keeps_the_registered_number_of_checkpoints(
    harness: Harness,
) -> None:
    cl = Cluster(harness, replicas=2, keep_checkpoints=3)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    cl.start_replica(1)
    for n in range(2, 6):
        cl.drivers[0].b.send(TakeCheckpoint())
        wait_until(lambda n=n: (cl.dir / f"serverchkpt{n}").exists(), f"checkpoint {n}")
    wait_until(lambda: file_numbers(cl.dir, "serverchkpt") == [3, 4, 5], "checkpoints 3, 4, 5")
    assert file_numbers(cl.dir, "serverlog") == [3, 4, 5]  # log 5 is being written
    assert all(k >= 3 for k in file_numbers(cl.dir, "serverseal"))
