"""The coordinator's phase table, checked as data: every flow the coordinator runs is a
path in it, nothing leaves LIVE, and a move outside it is refused with one line."""

from __future__ import annotations

import pytest
from ambrosia_ic.coordinator import TRANSITIONS, Phase
from ambrosia_ic.coordinator.phase import next_phase

from ambrosia_core.errors import CoordinatorError

S, F, R, U, W, L = (Phase.STARTING, Phase.FIRST_START, Phase.RECOVERING, Phase.UPGRADING,
                    Phase.FOLLOWING, Phase.LIVE)


def test_the_table_is_exactly_this() -> None:
    assert {p: set(to) for p, to in TRANSITIONS.items()} == {
        S: {F, R, W},
        F: {L},
        R: {U, L},
        U: {L},
        W: {F, L},
        L: set(),
    }


# Each start-up flow of a standalone coordinator and of an active/active replica.
FLOWS = {
    "standalone first start": [S, F, L],
    "standalone recovery": [S, R, L],
    "standalone live upgrade": [S, R, U, L],
    "replica wins epoch 1": [S, F, L],
    "replica takes over": [S, W, L],
    "replica takes over before any checkpoint": [S, W, F, L],
    "replica upgrades": [S, W, L],
}


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_every_flow_is_a_path_in_the_table(flow: str) -> None:
    path = FLOWS[flow]
    phase = path[0]
    for new in path[1:]:
        phase = next_phase("alpha", phase, new)
    assert phase is Phase.LIVE


def test_every_phase_is_reachable_and_reaches_live() -> None:
    reach = {S}
    while True:
        more = reach | {n for p in reach for n in TRANSITIONS[p]}
        if more == reach:
            break
        reach = more
    assert reach == set(Phase)
    for p in Phase:
        seen, todo = {p}, [p]
        while todo:
            for n in TRANSITIONS[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        assert Phase.LIVE in seen, p


@pytest.mark.parametrize(("current", "new"), [(L, R), (L, F), (F, R), (R, F), (U, R), (S, L)])
def test_a_move_outside_the_table_is_one_line(current: Phase, new: Phase) -> None:
    with pytest.raises(CoordinatorError) as err:
        next_phase("alpha", current, new)
    assert str(err.value) == (
        f"alpha: internal error: no move from phase {current.value} to {new.value}")
