"""An active/active first start interrupted before record 0 is durable is done again by
the replica that takes over, not recovered as an instance that never started."""

from __future__ import annotations

import socket

from ambrosia_core.wire import InitialMessage, TakeBecomingPrimaryCheckpoint, TakeCheckpoint
from tests.ic.conftest import Harness
from tests.ic.test_first_start import _run_chain
from tests.launcher import wait_until

from .cluster import Cluster


def test_a_takeover_redoes_an_interrupted_first_start(harness: Harness) -> None:
    cl = Cluster(harness, replicas=2)
    proc0 = harness.start("S", 0)
    b = harness.connect("S", 0)
    rec, _ = b.record()
    assert rec.messages == [TakeBecomingPrimaryCheckpoint()]
    b.send(InitialMessage(b"hello"))
    b.send_checkpoint(b'{"sent": [], "received": [], "acked": [], "initial": []}')
    b.close()  # the binding dies right after its first checkpoint
    assert proc0.wait(30) == 1
    assert (cl.dir / "serverchkpt1").exists()

    cl.start_replica(0)  # epoch 1 exists: it follows, as the checkpointer
    wait_until(lambda: "following the log as the checkpointer" in
               harness.stderr_of(cl.procs[0]), "replica 0 following")
    d1 = cl.start_replica(1)  # the standby claims epoch 2 and finds no first start done
    wait_until(d1.primary.is_set, "replica 1 primary")
    assert d1.events == ["take-becoming-primary-checkpoint"]
    wait_until(lambda: d1.snapshot()["initial"] == ["hello"], "record 0 on the primary")
    assert "primary of epoch 2: no checkpoint yet, first start" in harness.stderr_of(cl.procs[1])
    # The checkpointer starts following once record 0 is durable.
    d0 = cl.drivers[0]
    wait_until(lambda: d0.snapshot()["initial"] == ["hello"], "record 0 followed")
    assert d0.events == ["checkpoint-loaded"]


def test_a_busy_link_port_stops_a_replica_before_it_claims_an_epoch(harness: Harness) -> None:
    cl = Cluster(harness, replicas=1)
    ic_port = harness.reg("S").ic_port
    holder = socket.socket()
    holder.bind(("127.0.0.1", ic_port))
    holder.listen()
    try:
        r = harness.cli("ic", "--instance-name", "S", "--replica", "0")
    finally:
        holder.close()
    assert r.returncode == 1
    assert r.stderr == (f"ambrosia: error: cannot listen for links on 127.0.0.1:{ic_port}: "
                        "Address already in use\n")
    assert list(cl.dir.iterdir()) == []  # no epoch claimed, nothing written
    d0 = cl.start_replica(0)
    wait_until(d0.primary.is_set, "primary")
    assert d0.events == ["take-becoming-primary-checkpoint"]
    wait_until(lambda: d0.snapshot()["initial"] == ["hello"], "record 0")


def test_a_standby_follows_from_an_older_checkpoint_when_the_newest_is_damaged(
    harness: Harness,
) -> None:
    cl = Cluster(harness, replicas=3)
    d0 = cl.start_replica(0)
    wait_until(d0.primary.is_set, "first start")
    cl.start_replica(1)  # the checkpointer
    _run_chain(d0, 0, 3)
    d0.b.send(TakeCheckpoint())  # the primary starts log 2; the checkpointer writes 2
    wait_until(lambda: (cl.dir / "serverchkpt2").exists(), "checkpoint 2")
    _run_chain(d0, 3, 5)
    damaged = cl.dir / "serverchkpt2"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    d2 = cl.start_replica(2)
    wait_until(lambda: d2.snapshot() == d0.snapshot(), "the standby caught up")
    assert d2.events == ["checkpoint-loaded"]
    line = (f"ambrosia-ic: S: replica 2: {damaged}: damaged at offset {len(data) - 8}: check "
            "bytes do not match the checkpoint's content; following from checkpoint 1 and its "
            "logs instead")
    # The binding may catch up before the coordinator's line reaches its file.
    wait_until(lambda: line in harness.stderr_of(cl.procs[2]).splitlines(), "the fallback line")
    cl.kill9(0)  # the standby takes over with the whole history
    wait_until(d2.primary.is_set, "replica 2 primary")
    _run_chain(d2, 5, 7)
    assert d2.snapshot()["acked"] == [f"S:{k}" for k in range(7)]
    assert d2.snapshot()["initial"] == ["hello"]
