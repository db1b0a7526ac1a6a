"""A replica set's live upgrade as steps (``replication.upgrade_steps``): the exact steps
in their order, with the answers the directories and the registration would give, and
where each refusal stops them. The simulator's replicas take the same steps one world
step each (``tests/sim/aa_upgrade``); ``tests/activeactive/test_upgrade.py`` takes them
over real directories and processes."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from ambrosia_ic.errors import LockLostError, VersionSupersededError
from ambrosia_ic.replication.takeover import (
    FollowTo,
    GoLive,
    NewestLog,
    OpenLog,
    ReadSeal,
    WholeEnd,
    WriteSeal,
)
from ambrosia_ic.replication.upgrade_steps import (
    CheckEpochs,
    CheckOldEpoch,
    ClaimNewEpoch,
    Commit,
    GoLiveUpgraded,
    MarkUpgraded,
    OpenNewLog,
    ReadRegistration,
    RemoveUncommitted,
    SaveNewCheckpoint,
    TakeUpgradeCheckpoint,
    UpgradeStep,
    standby_takes_over,
    upgrade_replica,
)

DIRECTORY = {NewestLog: 4, ReadSeal: None, WholeEnd: 120, ClaimNewEpoch: True,
             ReadRegistration: 0}


def _take(steps: Generator[UpgradeStep, Any, Any], answers: dict[type, Any],
          taken: list[UpgradeStep]) -> None:
    answer: Any = None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration:
            return
        taken.append(step)
        answer = answers.get(type(step))


def test_an_upgrade_writes_the_new_version_then_commits_then_marks_the_old() -> None:
    """The checkpoint is durable before the registration names the new version (a
    commit first leaves version 1 with no checkpoint), what killed attempts left goes
    before the log is made, and the mark comes only after the commit."""
    taken: list[UpgradeStep] = []
    _take(upgrade_replica(0, 1), DIRECTORY, taken)
    assert taken == [NewestLog(), ReadSeal(4), WholeEnd(4), WriteSeal(4, 120),
                     FollowTo(4, 120), TakeUpgradeCheckpoint(5), CheckOldEpoch(),
                     ClaimNewEpoch(), ReadRegistration(), RemoveUncommitted(), OpenNewLog(5),
                     SaveNewCheckpoint(5), CheckEpochs(), Commit(1), MarkUpgraded(1),
                     GoLiveUpgraded(5)]


def test_an_upgrade_whose_claim_in_the_new_directory_lost_stops_before_clearing_it() -> None:
    taken: list[UpgradeStep] = []
    with pytest.raises(LockLostError, match="another replica is writing version 1"):
        _take(upgrade_replica(0, 1), {**DIRECTORY, ClaimNewEpoch: False}, taken)
    assert taken[-1] == ClaimNewEpoch()


def test_an_upgrade_already_committed_stops_before_clearing_the_new_directory() -> None:
    """Read once the claim there fenced any other upgrader: the registration naming
    version 1 means what is there counts, and must not be removed."""
    taken: list[UpgradeStep] = []
    with pytest.raises(VersionSupersededError, match="this upgrader of version 0 stops"):
        _take(upgrade_replica(0, 1), {**DIRECTORY, ReadRegistration: 1}, taken)
    assert RemoveUncommitted() not in taken


def test_a_standby_reads_the_registration_before_it_seals_or_writes() -> None:
    taken: list[UpgradeStep] = []
    with pytest.raises(VersionSupersededError, match=(
            r"the registration names version 1 now; this standby of version 0 stops "
            r"\(start replicas of version 1\)")):
        _take(standby_takes_over(True, 0), {**DIRECTORY, ReadRegistration: 1}, taken)
    assert taken == [ReadRegistration()]
    taken.clear()
    _take(standby_takes_over(True, 1), {**DIRECTORY, ReadRegistration: 1}, taken)
    assert taken == [ReadRegistration(), NewestLog(), ReadSeal(4), WholeEnd(4),
                     WriteSeal(4, 120), FollowTo(4, 120), OpenLog(5), GoLive(5)]
