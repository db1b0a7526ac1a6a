"""Live upgrade of a replica set, and a failed one falling back to the old version."""

from __future__ import annotations

from ambrosia_ic.logstore import file_numbers

from tests.ic.conftest import Harness
from tests.ic.rawbinding import CounterApp, Driver
from tests.launcher import wait_until

from .cluster import Cluster


def _running(harness: Harness) -> Cluster:
    cl = Cluster(harness)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    cl.start_replica(1)
    cl.start_replica(2)
    cl.start_client()
    cl.start_pump()
    wait_until(lambda: len(cl.received_by(0)) >= 20, "calls flowing")
    return cl


def test_live_upgrade_under_load(harness: Harness) -> None:
    cl = _running(harness)
    old_dir = cl.dir
    harness.add_replica("S", 3, upgrade_version=1)
    cl.start_replica(3)
    wait_until(lambda: harness.reg("S").current_version == 1, "the upgrade committed")
    d3 = cl.drivers[3]
    assert d3.events == ["checkpoint-loaded", "upgrade-take-checkpoint"]
    # The old primary was stopped, and the suspended secondaries die.
    for n in (0, 1, 2):
        assert cl.procs[n].wait(120) == 1
    assert "upgraded to version 1" in harness.stderr_of(cl.procs[2])
    new_dir = cl.dir
    assert new_dir.name == "S_1" and old_dir.name == "S_0"
    assert file_numbers(new_dir, "serverchkpt") and file_numbers(old_dir, "serverchkpt")
    at = len(cl.received_by(3))
    wait_until(lambda: len(cl.received_by(3)) > at + 10, "version 2 code applying calls")
    cl.stop_pump()
    calls = cl.check_exactly_once(3)
    state = d3.state()
    assert state["version"] == 2 and state["v2_handled"] > 0
    assert state["received"] == calls


def test_failed_upgrade_falls_back_to_the_old_version(harness: Harness) -> None:
    cl = _running(harness)
    harness.add_replica("S", 3, upgrade_version=1)
    proc = harness.start("S", 3)
    cl.procs[3] = proc
    d3 = Driver(harness.connect("S", 3), CounterApp("S"))
    d3.die_at = "upgrade-take-checkpoint"
    cl.drivers[3] = d3.start()
    d3.thread.join(60)
    assert "died-at-upgrade-take-checkpoint" in d3.events
    assert proc.wait(30) == 1
    new = cl.wait_primary(not_=3)
    assert new == 2  # a suspended standby, with the old version
    assert cl.drivers[2].events[-1] == "becoming-primary"
    assert harness.reg("S").current_version == 0
    assert not file_numbers(harness.logs / "S_1", "serverchkpt")
    at = len(cl.received_by(2))
    wait_until(lambda: len(cl.received_by(2)) > at + 10, "the old version going on")
    cl.stop_pump()
    cl.check_exactly_once(2)
    assert "version" not in cl.drivers[2].state()
