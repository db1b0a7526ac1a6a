"""Live upgrade of a replica set, and a failed one falling back to the old version."""

from __future__ import annotations

import signal

from ambrosia_ic.lease import UPGRADED_MARK
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
    cl.wait(lambda: len(cl.received_by(0)) >= 20, "calls flowing", 120)
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


def test_an_old_standby_never_takes_over_once_the_registration_names_the_new_version(
        harness: Harness) -> None:
    """The upgrade commits when the registration names the new version; the old
    directory's ``serverupgraded`` mark, written just after, only tells the old replicas
    sooner. An upgrader killed between the two leaves the registration at version 1 and
    no mark: an old standby that then finds the old primary gone must not take over with
    version 0 (a second primary, in the old directory, whose calls version 1 never sees).
    The mark is removed here to leave exactly that state, with a standby paused through
    the upgrade so that it resumes into it."""
    cl = _running(harness)
    old_dir = cl.dir
    standby = cl.procs[2]
    standby.send_signal(signal.SIGSTOP)
    try:
        harness.add_replica("S", 3, upgrade_version=1)
        cl.start_replica(3)
        wait_until(lambda: harness.reg("S").current_version == 1, "the upgrade committed")
        for n in (0, 1):
            assert cl.procs[n].wait(120) == 1
        (old_dir / UPGRADED_MARK).unlink()
    finally:
        standby.send_signal(signal.SIGCONT)
    wait_until(lambda: standby.poll() is not None or "primary of epoch" in
               harness.stderr_of(standby), "the old standby stopping (or taking over)", 120)
    err = harness.stderr_of(standby)
    assert "took over" not in err and "primary of epoch" not in err, err
    assert standby.wait(30) == 1, err
    assert ("the registration names version 1 now; this standby of version 0 stops "
            "(start replicas of version 1)") in err, err
    assert "Traceback" not in err
    at = len(cl.received_by(3))
    wait_until(lambda: len(cl.received_by(3)) > at + 10, "version 1 applying calls")
    cl.stop_pump()
    assert cl.check_exactly_once(3)


def test_an_upgrade_clears_what_a_killed_attempt_left_in_the_new_versions_directory(
        harness: Harness) -> None:
    """An upgrader killed after writing version 1's checkpoint and before the
    registration named version 1 leaves that checkpoint and its logs in version 1's
    directory, counting for nothing: the old version went on. The next upgrader removes
    them, so that its own log is made anew (a stale one of the same number refused it)
    and no replay of version 1 chains the stale checkpoint to the new logs. Such an
    attempt's files are put there by hand: a checkpoint of the old directory's first
    state, and logs of every number the upgrade could start at."""
    cl = _running(harness)
    old_dir = cl.dir
    new_dir = old_dir.parent / "S_1"
    new_dir.mkdir()
    (new_dir / "serverchkpt1").write_bytes((old_dir / "serverchkpt1").read_bytes())
    for k in range(1, 20):
        (new_dir / f"serverlog{k}").write_bytes(b"")
    harness.add_replica("S", 3, upgrade_version=1)
    cl.start_replica(3)
    wait_until(lambda: harness.reg("S").current_version == 1 or cl.procs[3].poll() is not None,
               "the upgrade committed (or its replica stopping)", 120)
    err = harness.stderr_of(cl.procs[3])
    assert harness.reg("S").current_version == 1, err
    (n,) = file_numbers(new_dir, "serverchkpt")
    assert n >= 2 and min(file_numbers(new_dir, "serverlog")) == n, err
    at = len(cl.received_by(3))
    wait_until(lambda: len(cl.received_by(3)) > at + 10, "version 1 applying calls")
    cl.stop_pump()
    assert cl.check_exactly_once(3)
