"""When the log moves on to its next file and a checkpoint is taken: a state table, no I/O.

A standalone coordinator checkpoints at every switch of log files: the committer switches
between two records when the current log reached its size, or when the binding asked for
a checkpoint. One checkpoint is taken at a time. A request that comes while one is being
taken is remembered and served after it (the state being saved may predate what the
binding wants kept); a size reached meanwhile is not (the switch after the checkpoint
starts a log of its own anyway). A replica's sink switches without a checkpoint.

``TABLE`` is the whole rule: (state, event) -> (next state, whether the committer must
be woken). A pair that is not in it is a misuse by the shell and raises.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["TABLE", "CheckpointPlan", "Event", "State"]


class State(enum.Enum):
    IDLE = "idle"
    SWITCH_WANTED = "switch wanted"  # the committer switches between its next records
    IN_FLIGHT = "checkpoint in flight"  # the binding's checkpoint is being saved
    IN_FLIGHT_ASKED = "checkpoint in flight, another asked for"


class Event(enum.Enum):
    SIZE_REACHED = "the log reached its size"
    ASKED = "the binding asked for a checkpoint"
    SWITCHED = "switched logs, with a checkpoint"
    SWITCHED_ONLY = "switched logs, without a checkpoint"
    SAVED = "the checkpoint was saved"


S, E = State, Event
TABLE: Final[dict[tuple[State, Event], tuple[State, bool]]] = {
    (S.IDLE, E.SIZE_REACHED): (S.SWITCH_WANTED, False),  # the committer is running
    (S.IDLE, E.ASKED): (S.SWITCH_WANTED, True),
    (S.SWITCH_WANTED, E.SIZE_REACHED): (S.SWITCH_WANTED, False),
    (S.SWITCH_WANTED, E.ASKED): (S.SWITCH_WANTED, True),
    (S.SWITCH_WANTED, E.SWITCHED): (S.IN_FLIGHT, False),
    (S.SWITCH_WANTED, E.SWITCHED_ONLY): (S.IDLE, False),
    (S.IN_FLIGHT, E.SIZE_REACHED): (S.IN_FLIGHT, False),
    (S.IN_FLIGHT, E.ASKED): (S.IN_FLIGHT_ASKED, False),
    (S.IN_FLIGHT, E.SAVED): (S.IDLE, False),
    (S.IN_FLIGHT_ASKED, E.SIZE_REACHED): (S.IN_FLIGHT_ASKED, False),
    (S.IN_FLIGHT_ASKED, E.ASKED): (S.IN_FLIGHT_ASKED, False),
    (S.IN_FLIGHT_ASKED, E.SAVED): (S.SWITCH_WANTED, True),
}
del S, E


class CheckpointPlan:
    """Where a coordinator is in ``TABLE``."""

    def __init__(self) -> None:
        self.state = State.IDLE

    @property
    def switch_wanted(self) -> bool:
        return self.state is State.SWITCH_WANTED

    @property
    def in_flight(self) -> bool:
        return self.state in (State.IN_FLIGHT, State.IN_FLIGHT_ASKED)

    def on(self, event: Event) -> bool:
        """Apply ``event``; returns whether the committer must be woken.

        Raises:
            RuntimeError: ``event`` cannot happen in this state (a bug of the shell).
        """
        found = TABLE.get((self.state, event))
        if found is None:
            raise RuntimeError(f"checkpoint plan: {event.value} while {self.state.value}")
        self.state, wake = found
        return wake
