"""A replica set's live upgrade in the simulation (``aa_upgrade``): the hole it found and
that is still open. The seeds' runs (``test_simulation``) check the upgrade's outcome and
find its mutants; this shows what the simulation does with a pause past the lease just
before the upgrader writes the registration, which the seeds leave out."""

from __future__ import annotations

import pytest

from tests.sim import aa_upgrade
from tests.sim.world import Scenario, SimFailure

SEEDS = 2000


def test_a_pause_between_the_upgraders_last_look_and_its_commit_gives_two_primaries(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The upgrader looks that it still holds both epochs, is paused past the lease, a
    standby of the old version claims and reads the registration (still the old
    version) and takes over, and the upgrader resumes and writes the registration:
    two primaries, one of each version. Nothing orders that write after the old
    directory's epochs; until something does, the seeds leave this pause out."""
    monkeypatch.setattr(aa_upgrade, "PAUSE_BEFORE_COMMIT", True)
    for seed in range(SEEDS):
        scenario = Scenario.of(seed)
        if not scenario.aa_upgrade:
            continue
        try:
            scenario.run()
        except SimFailure as err:
            assert "is a live primary of version 0" in str(err), str(err)
            return
    pytest.fail(f"no run of {SEEDS} seeds paused the upgrader just before its commit")
