"""The decisions of a Raft log store's writer and readers, sans-IO: what the asyncio code
of ``raft_store`` and ``replication.raft`` asks before it reads or writes, with the time
passed in (the simulator, ``tests/sim/raftlog``, asks the same functions).

- ``must_look``: a primary may send an entry of its epoch without reading the log first
  only within half a lease of sending its last entry that counted (a standby claims no
  sooner than a lease after it saw that entry).
- ``may_claim``: a standby claims when the epoch's holder was silent past the lease, or
  its process ended; ``standby_claim`` says how a following standby claims (the first
  claim of an instance nobody holds at once; then only past the lease, the silence checked
  again once caught up unless the holder's process is known gone), and ``standby_wait``
  how long it waits for news before it looks again.
- ``superseded``: a store whose epoch is not the newest the view knows writes nothing.
- ``Silence``: how long a reader saw nothing of the current epoch, not counting a stall
  of the cluster (a read that waited longer than a quarter lease restarts the silence
  from the answer, plus the time the primary's client may take to find the leader).
"""

from __future__ import annotations

import math

__all__ = ["Silence", "may_claim", "must_look", "standby_claim", "standby_wait", "superseded"]


def must_look(now: float, fresh: float, lease: float) -> bool:
    """True if a primary that last sent an entry that counted (or last looked) at
    ``fresh`` must read the log before it sends another."""
    return now - fresh > lease / 2


def may_claim(silent: float, lease: float, *, ended: bool = False) -> bool:
    """True if a standby that saw nothing of the current epoch for ``silent`` seconds
    may claim the next one (``ended``: the holder's process is known gone)."""
    return silent > lease or ended


def standby_claim(epoch: int, silent: float, lease: float, *,
                  ended: bool = False) -> tuple[int, bool] | None:
    """Whether a standby whose view is at ``epoch`` claims now, and how: ``(after,
    if_silent)`` for the store's ``claim``, or None to wait (``standby_wait``)."""
    if epoch == 0:
        return 0, False  # nobody holds the instance: the first claim in the log wins
    if may_claim(silent, lease, ended=ended):
        return epoch, not ended
    return None


def standby_wait(silent: float, lease: float, poll: float) -> float:
    """How long a standby that did not claim waits for news before it reads again: at
    most ``poll``, and no longer than the lease has left (a dead primary sends nothing)."""
    return min(poll, max(0.002, lease - silent))


def superseded(held: int | None, epoch: int) -> bool:
    """True if a store holding ``held`` (None: not claimed, or resigned) must write
    nothing, given the newest epoch ``epoch`` its view read."""
    return held is None or epoch != held


class Silence:
    """When a reader last saw anything of the current epoch, stalls discounted."""

    def __init__(self, now: float, lease: float, rediscovery: float = 0.0) -> None:
        self.seen_at = now
        self.lease = lease
        self.stall = lease / 4
        self.rediscovery = rediscovery
        self.stalled_for = 0.0  # the longest stall since the owner last took it

    def read(self, asked: float, answered: float) -> None:
        """A read asked at ``asked`` was answered at ``answered``."""
        if answered - asked > self.stall:
            # This reader was blind meanwhile: the primary gets a fresh lease from the
            # moment the cluster answers again (and its client found the leader).
            self.stalled_for = max(self.stalled_for, answered - asked)
            self.seen_at = max(self.seen_at, answered + self.rediscovery)

    def saw_epoch(self, now: float) -> None:
        """The read brought an entry of the current epoch."""
        self.seen_at = max(self.seen_at, now)

    def silent_for(self, now: float, resigned: bool) -> float:
        return math.inf if resigned else now - self.seen_at
