"""A Raft election alone costs no takeover: the Raft leader killed under load with the
default lease (1 s, shorter than an election here) leaves the primary in place; a
standby counts the primary's silence only over time in which it could read the cluster
itself."""

from __future__ import annotations

import time

import pytest
from ambrosia_ic.raft.cluster import LocalCluster

from tests.ic.conftest import Harness
from tests.launcher import wait_until

from .conftest import restart_missing
from .test_failover import start

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_killing_the_raft_leader_under_load_keeps_the_primary(
        harness: Harness, whole_cluster: LocalCluster) -> None:
    cl = start(harness, whole_cluster)  # the default lease
    time.sleep(0.5)
    whole_cluster.kill_peer(whole_cluster.leader())
    before = cl.sent
    # Appends resume once a new leader is elected: the same primary applies new calls.
    wait_until(lambda: len(cl.received_by(0)) > before + 20, "appends resuming", 60)
    restart_missing(whole_cluster)
    cl.stop_pump()
    said = "".join(harness.stderr_of(p) for p in cl.procs.values())
    assert "took over" not in said and "fenced" not in said, said
    calls = cl.check_exactly_once(0)
    assert len(calls) > 50
    assert cl.primary() == 0
    # The standbys' reads waited for the election too, longer than they may be silent.
    assert any("the cluster did not answer" in harness.stderr_of(cl.procs[n]) for n in (1, 2))
    assert all(p.poll() is None for p in cl.procs.values())
