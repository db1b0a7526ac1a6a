"""What an active/active instance's checkpointing secondary does after each look at the
shared log: a decision from what the look found and what the directory holds, with no
process, file or event loop. The replica (``shared_dir``) and the simulation
(``tests/sim``) both call it.

Checkpoint N+1 is the state at the start of log N+1: the binding's state once every
committed record of log N was delivered to it, and no record of log N+1. So it is
taken exactly when log N was read whole (sealed and read up to its seal, or followed by
log N+1 and read to its end), and only once log N+1 exists: a takeover seals log N
before its primary creates log N+1, and a checkpoint is never written before its log
(a checkpoint without its log is damage, never the trace of a crash).
"""

from __future__ import annotations

import enum

__all__ = ["Move", "next_move"]


class Move(enum.Enum):
    READ = "read on"  # log N is not read whole yet
    WAIT = "wait for the next log"  # sealed, but log N+1 does not exist yet
    CHECKPOINT = "checkpoint N+1, then go on to log N+1"
    NEXT = "go on to log N+1"  # checkpoint N+1 exists already


def next_move(done: bool, checkpoint_exists: bool, next_log_exists: bool) -> Move:
    """The secondary's move after a look at log N.

    Args:
        done: log N is complete and every committed record of it was delivered.
        checkpoint_exists: checkpoint N+1 is in the directory.
        next_log_exists: log N+1 is in the directory.
    """
    if not done:
        return Move.READ
    if checkpoint_exists:
        return Move.NEXT
    if not next_log_exists:
        return Move.WAIT
    return Move.CHECKPOINT
