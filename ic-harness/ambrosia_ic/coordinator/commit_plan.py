"""The committer's and the back-pressure's decisions, without I/O.

The committer (``commit``) runs a loop: while inputs wait or a log switch is wanted,
switch the log (first: the checkpoint it asks for holds the position at a record
boundary) or take the next record and write it. ``next_move`` is that loop's choice
from the core's state; the shell does what it says (open the next log, or write and
sync a record) and asks again.

Back-pressure: inbound links stop being read while the binding is not reading what was
delivered (its buffer is over its high-water mark) or while the log is behind (more
than ``limit`` inputs wait). ``links`` says what to do with them: pause (and, when the
buffer is full and no drain is awaited yet, await one, then ask again), resume, or
leave them as they are (a drain is awaited: the links resume once it ends). The binding
itself is never paused.

The live shell and the simulation (``tests/sim``) both run these.
"""

from __future__ import annotations

import enum

__all__ = ["MAX_PENDING", "Links", "Move", "links", "next_move"]

MAX_PENDING = 1024  # inputs waiting for the log before the links are paused


class Move(enum.Enum):
    """The committer's next step."""

    SWITCH = "switch"  # move to the next log (and ask for its checkpoint)
    TAKE = "take"  # take the next record from what waits, write and sync it
    IDLE = "idle"  # nothing to do until woken


def next_move(pending: int, switch_wanted: bool) -> Move:
    """What the committer does next: a wanted log switch comes before the next record
    (the switch's position is where the records written so far end)."""
    if switch_wanted:
        return Move.SWITCH
    if pending:
        return Move.TAKE
    return Move.IDLE


class Links(enum.Enum):
    """What back-pressure does with the inbound links."""

    PAUSE = "pause"
    PAUSE_AND_DRAIN = "pause-and-drain"  # pause, and await the binding's drain
    RESUME = "resume"
    HOLD = "hold"  # as they are: a drain is awaited, and its end asks again


def links(full: bool, pending: int, draining: bool, limit: int = MAX_PENDING) -> Links:
    """Whether inbound links pause or resume.

    Args:
        full: the binding's send buffer is over its high-water mark.
        pending: inputs waiting for the log.
        draining: a wait for the binding's drain is in progress.
        limit: more than this many waiting inputs pause the links.
    """
    if full or pending > limit:
        return Links.PAUSE_AND_DRAIN if full and not draining else Links.PAUSE
    return Links.HOLD if draining else Links.RESUME
