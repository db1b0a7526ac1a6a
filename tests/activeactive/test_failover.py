"""Three replicas, a client streaming numbered calls, the primary killed with kill -9."""

from __future__ import annotations

import random
import time

import pytest

from tests.ic.conftest import Harness
from tests.launcher import wait_until

from .cluster import Cluster


def test_roles_first_start_checkpointer_standby(harness: Harness) -> None:
    cl = Cluster(harness)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    assert cl.drivers[0].events == ["take-becoming-primary-checkpoint"]
    cl.start_replica(1)
    # The checkpointer role goes to whichever follower locks it first, and a coordinator
    # reports ready before it takes a role: replica 2 starts once replica 1 has its role.
    wait_until(lambda: "following the log as the" in harness.stderr_of(cl.procs[1]),
               "replica 1 taking a role")
    cl.start_replica(2)
    wait_until(lambda: "checkpoint-loaded" in cl.drivers[2].events, "standby following")
    wait_until(lambda: "following the log as the" in harness.stderr_of(cl.procs[2]),
               "replica 2 taking a role")
    assert cl.primary() == 0
    for n in (1, 2):
        assert not cl.drivers[n].primary.is_set()
    # A thread of this process copies each coordinator's stderr to its file; under load
    # it can lag behind the events that reach the drivers, so the lines are waited for.
    def logged(n: int, role: str) -> bool:
        return f"following the log as the {role}" in harness.stderr_of(cl.procs[n])

    wait_until(lambda: logged(1, "checkpointer"), "replica 1 logging its role")
    wait_until(lambda: logged(2, "standby"), "replica 2 logging its role")


@pytest.mark.slow
def test_kill9_of_the_primary_under_load_every_call_exactly_once_in_order(
    harness: Harness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Zeros written 4 KiB ahead: the primary extends its log every few dozen records,
    # the followers read records written into zeros, and a kill leaves a log ending in
    # zeros for the next primary to seal.
    monkeypatch.setenv("AMBROSIA_IC_PREALLOC", "4")
    rnd = random.Random(7)
    cl = Cluster(harness)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    cl.start_replica(1)
    cl.start_replica(2)
    cl.start_client()
    cl.start_pump()
    primary = 0
    for _ in range(3):
        time.sleep(rnd.uniform(0.2, 0.8))
        sent_before = cl.sent
        cl.kill9(primary)
        new = cl.wait_primary(not_=primary)
        assert new != 1  # the checkpointing secondary never becomes primary
        assert cl.drivers[new].events[-1] == "becoming-primary"
        wait_until(lambda n=new, s=sent_before: len(cl.received_by(n)) > s,
                   "the new primary applying new calls")
        cl.start_replica(primary)  # the killed replica comes back as a standby
        primary = new
    cl.stop_pump()
    calls = cl.check_exactly_once(primary)
    assert len(calls) > 50
    # Standbys following the log applied the same calls in the same order.
    for n, d in cl.drivers.items():
        if n != primary and d.thread.is_alive():
            wait_until(lambda n=n: cl.received_by(n) == calls, f"replica {n} caught up")
    logs = sorted(cl.dir.glob("serverlog*"))
    assert any(p.stat().st_size > 4096 for p in logs)  # the region was extended
