"""``commit_plan``: the committer's next move and back-pressure, as a table."""

from __future__ import annotations

import pytest
from ambrosia_ic.coordinator.commit_plan import MAX_PENDING, Links, Move, links, next_move


@pytest.mark.parametrize(("pending", "switch", "move"), [
    (0, False, Move.IDLE),
    (3, False, Move.TAKE),
    (0, True, Move.SWITCH),
    (3, True, Move.SWITCH),  # the switch first: its position is a record boundary
])
def test_the_committer_switches_before_it_takes_and_idles_on_nothing(
        pending: int, switch: bool, move: Move) -> None:
    assert next_move(pending, switch) is move


@pytest.mark.parametrize(("full", "pending", "draining", "todo"), [
    (False, 0, False, Links.RESUME),
    (False, MAX_PENDING, False, Links.RESUME),  # at the limit: still read
    (False, MAX_PENDING + 1, False, Links.PAUSE),  # past it: the log is behind
    (True, 0, False, Links.PAUSE_AND_DRAIN),  # the binding reads nothing: await it
    (True, 0, True, Links.PAUSE),  # a drain is already awaited
    (True, MAX_PENDING + 1, False, Links.PAUSE_AND_DRAIN),
    (False, MAX_PENDING + 1, True, Links.PAUSE),
    (False, 0, True, Links.HOLD),  # the drain's end resumes them
])
def test_links_pause_over_either_limit_and_resume_only_after_a_drain(
        full: bool, pending: int, draining: bool, todo: Links) -> None:
    assert links(full, pending, draining) is todo


def test_the_limit_is_a_parameter() -> None:
    assert links(False, 3, False, limit=2) is Links.PAUSE
    assert links(False, 2, False, limit=2) is Links.RESUME
