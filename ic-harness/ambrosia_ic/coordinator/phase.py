"""The coordinator's phases and the moves between them, as a table.

A standalone coordinator goes ``STARTING -> FIRST_START -> LIVE`` or
``STARTING -> RECOVERING [-> UPGRADING] -> LIVE``. An active/active replica follows the
shared log first (``FOLLOWING``) and goes live when it takes over or finishes an upgrade;
the replica that wins the very first epoch, or takes over before any checkpoint exists,
does the first start itself. ``LIVE`` is final: a coordinator stops, it never goes back.

Only a live coordinator commits new inputs and takes checkpoints its binding asks for.
"""

from __future__ import annotations

import enum

from ambrosia_core.errors import CoordinatorError

__all__ = ["TRANSITIONS", "Phase", "next_phase"]


class Phase(enum.Enum):
    STARTING = "starting"  # ports open, the start-up flow not chosen yet
    FIRST_START = "first-start"  # checkpoint 1, log 1 and record 0 are being written
    RECOVERING = "recovering"  # replaying a checkpoint and the logs after it
    UPGRADING = "upgrading"  # recovered with the old code; writing the new version's checkpoint
    FOLLOWING = "following"  # an active/active replica reading the log another one writes
    LIVE = "live"  # committing inputs; the link server listens


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.STARTING: frozenset({Phase.FIRST_START, Phase.RECOVERING, Phase.FOLLOWING}),
    Phase.FIRST_START: frozenset({Phase.LIVE}),
    Phase.RECOVERING: frozenset({Phase.UPGRADING, Phase.LIVE}),
    Phase.UPGRADING: frozenset({Phase.LIVE}),
    Phase.FOLLOWING: frozenset({Phase.FIRST_START, Phase.LIVE}),
    Phase.LIVE: frozenset(),
}


def next_phase(name: str, current: Phase, new: Phase) -> Phase:
    """``new``, if the table allows the move from ``current``.

    Raises:
        CoordinatorError: the move is not in the table (a fault of the coordinator's
            own flow, named with the instance and both phases).
    """
    if new not in TRANSITIONS[current]:
        raise CoordinatorError(
            f"{name}: internal error: no move from phase {current.value} to {new.value}")
    return new
