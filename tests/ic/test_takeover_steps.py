"""A shared directory's takeover as steps (``replication.takeover``): the exact steps for
each state a new primary can find, with the answers a directory would give. The
simulator's replicas take the same steps, one world step each, and find a mutant that
skips delivering up to the seal; ``tests/activeactive`` takes them over real directories."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ambrosia_ic.replication.takeover import (
    FirstStart,
    FollowTo,
    GoLive,
    LoadCheckpoint,
    NewestLog,
    OpenLog,
    ReadSeal,
    TakeoverStep,
    WholeEnd,
    WriteSeal,
    seal_and_finish,
    take_over,
)


def _take(steps: Generator[TakeoverStep, Any, Any],
          answers: dict[type, Any]) -> tuple[list[TakeoverStep], Any]:
    taken: list[TakeoverStep] = []
    answer: Any = None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as done:
            return taken, done.value
        taken.append(step)
        answer = answers.get(type(step))


def test_a_follower_seals_the_newest_log_where_its_whole_records_end_and_goes_on_after(
        ) -> None:
    taken, _ = _take(take_over(following=True), {NewestLog: 4, ReadSeal: None,
                                                 WholeEnd: 1234})
    assert taken == [NewestLog(), ReadSeal(4), WholeEnd(4), WriteSeal(4, 1234),
                     FollowTo(4, 1234), OpenLog(5), GoLive(5)]


def test_an_earlier_takeover_s_seal_counts_and_is_not_moved() -> None:
    taken, _ = _take(take_over(following=True), {NewestLog: 4, ReadSeal: 900})
    assert taken == [NewestLog(), ReadSeal(4), FollowTo(4, 900), OpenLog(5), GoLive(5)]


def test_a_replica_that_follows_nothing_yet_loads_the_checkpoint_first() -> None:
    taken, _ = _take(take_over(following=False), {LoadCheckpoint: True, NewestLog: 1,
                                                  ReadSeal: 77})
    assert taken == [LoadCheckpoint(), NewestLog(), ReadSeal(1), FollowTo(1, 77), OpenLog(2),
                     GoLive(2)]


def test_with_no_checkpoint_yet_the_new_primary_makes_the_first_start() -> None:
    taken, _ = _take(take_over(following=False), {LoadCheckpoint: False})
    assert taken == [LoadCheckpoint(), FirstStart()]


def test_the_upgrader_seals_and_finishes_and_is_told_the_next_log() -> None:
    taken, n = _take(seal_and_finish(), {NewestLog: 7, ReadSeal: None, WholeEnd: 10})
    assert taken == [NewestLog(), ReadSeal(7), WholeEnd(7), WriteSeal(7, 10), FollowTo(7, 10)]
    assert n == 8
