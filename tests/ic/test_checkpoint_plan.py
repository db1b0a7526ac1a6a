"""When the log switches and a checkpoint is taken, as a state table without I/O: every
pair named, one checkpoint at a time, and no request of the binding ever lost."""

from __future__ import annotations

import pytest
from ambrosia_ic.coordinator.checkpoint_plan import TABLE, CheckpointPlan, Event, State
from hypothesis import given, settings
from hypothesis import strategies as st


def test_the_table_names_what_each_event_does_in_each_state() -> None:
    # Every state is reachable and left; the events a shell can send in each state are
    # in the table; the rest are refused (the committer switches only when asked to,
    # and only a checkpoint in flight is saved).
    shell_can_send = {
        State.IDLE: {Event.SIZE_REACHED, Event.ASKED},
        State.SWITCH_WANTED: {Event.SIZE_REACHED, Event.ASKED, Event.SWITCHED,
                              Event.SWITCHED_ONLY},
        State.IN_FLIGHT: {Event.SIZE_REACHED, Event.ASKED, Event.SAVED},
        State.IN_FLIGHT_ASKED: {Event.SIZE_REACHED, Event.ASKED, Event.SAVED},
    }
    assert {(s, e) for s, events in shell_can_send.items() for e in events} == set(TABLE)
    plan = CheckpointPlan()
    with pytest.raises(RuntimeError, match="the checkpoint was saved while idle"):
        plan.on(Event.SAVED)
    assert plan.state is State.IDLE


def test_a_request_during_a_checkpoint_is_served_after_it() -> None:
    plan = CheckpointPlan()
    assert plan.on(Event.ASKED) and plan.switch_wanted
    assert not plan.on(Event.SWITCHED) and plan.in_flight
    assert not plan.on(Event.ASKED)  # remembered, not a second checkpoint at once
    assert not plan.on(Event.SIZE_REACHED)
    assert plan.on(Event.SAVED) and plan.switch_wanted  # the committer is woken for it
    assert not plan.on(Event.SWITCHED_ONLY) and plan.state is State.IDLE


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([Event.SIZE_REACHED, Event.ASKED, "commit", "save"]),
                max_size=60))
def test_one_checkpoint_at_a_time_and_every_request_gets_one_that_starts_after_it(
        steps: list[object]) -> None:
    """A shell that runs the committer when woken (or after a size trigger) and saves a
    checkpoint when it likes: each binding request is followed by a checkpoint that
    starts after it, and no two are in flight at once."""
    plan = CheckpointPlan()
    waiting_requests = 0  # asked, and no checkpoint started since
    in_flight = 0
    for step in steps:
        if isinstance(step, Event):
            plan.on(step)
            if step is Event.ASKED:
                waiting_requests += 1
        elif step == "commit" and plan.switch_wanted:
            plan.on(Event.SWITCHED)
            in_flight += 1
            waiting_requests = 0
        elif step == "save" and plan.in_flight:
            plan.on(Event.SAVED)
            in_flight -= 1
        assert in_flight == (1 if plan.in_flight else 0)
        # A request not yet served is held: a switch is wanted, or one will be after
        # the checkpoint in flight.
        if waiting_requests:
            assert plan.state in (State.SWITCH_WANTED, State.IN_FLIGHT_ASKED)
