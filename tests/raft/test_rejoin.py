"""A fenced Raft primary rejoins as a standby by itself (``tests.activeactive.rejoin``):
two replicas whose log is in a real three-peer cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from ambrosia_ic.raft.cluster import LocalCluster

from tests.activeactive.rejoin import pause_resume_and_kill

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# `make chaos`: in make test a paused Raft primary is fenced and rejoins in its process
# (test_failover), the binding's start afresh and the later takeover are the shared
# directory's (tests/activeactive/test_rejoin), and the simulation pauses Raft primaries
# between any two steps of an append (tests/sim/raftlog).
@pytest.mark.chaos
def test_a_paused_primary_rejoins_as_a_standby_and_takes_over_later(
        tmp_path: Path, whole_cluster: LocalCluster) -> None:
    pause_resume_and_kill(tmp_path, whole_cluster.address, replicas=2)
