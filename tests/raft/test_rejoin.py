"""A fenced Raft primary rejoins as a standby by itself (``tests.activeactive.rejoin``):
two replicas whose log is in a real three-peer cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from ambrosia_ic.raft.cluster import LocalCluster

from tests.activeactive.rejoin import pause_resume_and_kill

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_paused_primary_rejoins_as_a_standby_and_takes_over_later(
        tmp_path: Path, whole_cluster: LocalCluster) -> None:
    pause_resume_and_kill(tmp_path, whole_cluster.address, replicas=2)
