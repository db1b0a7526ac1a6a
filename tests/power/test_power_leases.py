"""Power cuts under an active/active replica set (``leases.py``): its registry, shared log,
epochs (the leases), seals and checkpoints, and its caller's log, on the disk that loses
power, while the caller streams numbered calls. Every acknowledged call is applied
exactly once and in order by the primary at the end, every answer is held, one primary
follows each restart, and the time-travel replay of both instances agrees."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from .disk import PowerDisk
from .leases import PoweredReplicaSet

# `make chaos`: power cuts stay in make test through tests/power/test_power_chaos.py.
pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.mark.slow
def test_calls_survive_power_cuts_of_a_replica_set_exactly_once(disk: PowerDisk,
                                                                tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(1 << 32)
    lines: list[str] = []
    rs = PoweredReplicaSet(disk, tmp_path, seed)
    try:
        rs.start()
        rs.start_pump()
        summary = rs.exercise(cuts=2, kills=1, takeover_cuts=True, say=lines.append)
    except AssertionError as e:
        pytest.fail(f"seed {seed}: {e}\n" + "\n".join(lines))
    finally:
        rs.close()
    assert summary["cuts"] == 4 and disk.cuts == 4, lines
    assert all(rs.reports), rs.reports  # each cut dropped something: it proved something
    assert summary["calls"] > 100, summary
    assert disk.complaints() == []
