"""The simulation keeps two answers between steps, to spare work it does after every step:
a replica's last look at the log (``ReplicaNode._poll``, kept while nothing it reads has
changed) and an instance's last replay (``replay.Replays``, which goes on from where it
was while the log still begins with what it read). Over seeds with replicas, crashes,
torn writes and recoveries, each kept answer equals the one made afresh, at every use."""

from __future__ import annotations

import collections
import copy
from typing import Any

import pytest

from tests.sim.replay import Replays
from tests.sim.world import ReplicaNode, Scenario, World

SEEDS = 40


def test_kept_answers_equal_fresh_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    used: collections.Counter[str] = collections.Counter()
    poll = ReplicaNode._poll

    def polled(self: ReplicaNode) -> Any:
        before = self._polled
        got = poll(self)
        used["look kept"] += before is not None and got is before[1]
        kept, self._polled = self._polled, None
        fresh = poll(self)
        self._polled = kept
        assert got == fresh, (self.id, got, fresh)
        return got

    state = Replays.state

    def replayed(self: Replays, name: str, *args: Any) -> Any:
        went_on = name in self._kept
        got = state(self, name, *args)
        fresh = state(Replays(self._new_engine), name, *args)
        used["replay went on"] += went_on
        assert got == fresh, (name, got, fresh)
        return got

    monkeypatch.setattr(ReplicaNode, "_poll", polled)
    monkeypatch.setattr(Replays, "state", replayed)
    for seed in range(SEEDS):
        Scenario.of(seed).run()
    # Both were used, many times: the comparisons above are not vacuous.
    assert used["look kept"] >= 1000 and used["replay went on"] >= 50, used


def _kept_log(seed: int) -> tuple[World, str, Any, int, list[bytes]]:
    """Seed ``seed``'s run, and its instance with the most records kept from its oldest
    kept checkpoint: its name, its disk, the checkpoint and the records' bytes."""
    world = Scenario.of(seed).run()
    kept = {name: world.disks[name].replay_from() for name in world.names}
    name = max(world.names, key=lambda k: len(kept[k][1]))  # type: ignore[index]
    found = kept[name]
    assert found is not None
    first, records = found
    return world, name, world.disks[name], first, [r.wire for r in records]


def test_a_replay_of_a_log_that_no_longer_begins_as_read_starts_afresh() -> None:
    # The first seed whose kept log changes the state after its first record, again
    # after its second and again by its end: a replay that read on wrongly shows.
    for seed in range(50):
        world, name, disk, first, wires = _kept_log(seed)
        cid = world.cid[name]

        def afresh(log: list[bytes], world: World = world, name: str = name,
                   disk: Any = disk, cid: int = cid, first: int = first) -> Any:
            return Replays(world.new_engine).state(name, disk.app, cid, first, log)

        if len(wires) >= 3 and len({repr(afresh(wires[:k]))
                                    for k in (1, 2, len(wires))}) == 3:
            break
    else:
        raise AssertionError("no seed of 50 keeps a log whose records each change the state")

    replays = Replays(world.new_engine)
    # Copies: the state a replay gives is its binding's, which reads on.
    read = copy.deepcopy(replays.state(name, disk.app, cid, first, wires[:2]))
    # The log no longer holds what was read (its second record is gone): read afresh.
    shorter = copy.deepcopy(replays.state(name, disk.app, cid, first, wires[:1]))
    assert shorter == afresh(wires[:1]) != read
    # A log that begins with what was read: read on, to the state read afresh.
    assert replays.state(name, disk.app, cid, first, wires) == afresh(wires) != shorter
