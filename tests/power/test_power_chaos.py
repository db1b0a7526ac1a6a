"""Power cuts of a whole machine in the chaos run: every process killed and everything
not yet fsynced dropped (file data and directory entries), then all restarted. The
instances' registry, logs, checkpoints, digests and locks live on the disk that loses
power; afterwards every request is applied exactly once and in order, every reply is
held, and the time-travel replay of each instance agrees with its digests."""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from .disk import PowerDisk

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chaos() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("chaos")
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.slow
def test_requests_survive_power_cuts_exactly_once(chaos: ModuleType, disk: PowerDisk,
                                                  tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(1 << 32)
    lines: list[str] = []
    (tmp_path / "run").mkdir()
    run = chaos.ChaosRun(200, 2, seed, tmp_path / "run", checkpoint_every=20, stall=60.0,
                         say=lines.append, power_cuts=3, disk=disk)
    try:
        summary = run.execute()
    except chaos.ChaosError as e:
        pytest.fail(f"seed {seed}: {e}\nreproduce with: {run.reproduce()}")
    assert summary["killed"]["power"] == 3 and disk.cuts == 3, lines
    # The cuts did drop something each time (unsynced digests, at least): a disk that
    # lost nothing would prove nothing.
    assert all(report for report in disk.reports), disk.reports
    assert disk.complaints() == []
    assert str(disk.mount) in str(run.home)


def test_a_power_cut_schedule_keeps_the_seeds_kills(chaos: ModuleType, tmp_path: Path) -> None:
    plain = chaos.ChaosRun(500, 8, 7, tmp_path / "a").schedule()

    class Disk:  # only its mount point is read before the run starts
        mount = tmp_path / "disk"

    cut = chaos.ChaosRun(500, 8, 7, tmp_path / "b", power_cuts=3, disk=Disk()).schedule()
    assert [step for step in cut if step[1] != chaos.POWER] == plain
    assert sum(step[1] == chaos.POWER for step in cut) == 3
    assert [p for p, _, _ in cut] == sorted(p for p, _, _ in cut)
    with pytest.raises(ValueError, match="power cuts need a disk"):
        chaos.ChaosRun(500, 8, 7, tmp_path / "c", power_cuts=1)
