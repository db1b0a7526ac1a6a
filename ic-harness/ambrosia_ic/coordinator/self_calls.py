"""An instance's calls to itself, numbered so that each is logged once: the rule, without I/O.

A self-call is an input like any other, but its sender is the instance itself, so a
recovery regenerates it: the binding replays from a checkpoint and makes the same calls
again. Each replayable self-call gets the next number; one whose number the log already
holds (``logged``: the instance's own position in the log's inputs) is a regenerated one
and is dropped. The calls made but not yet logged are kept (``unacked``) until a durable
record holds them, and go into a checkpoint's outputs: a checkpoint may be taken between a
call and the record that logs it, and the call must then be logged after a recovery from
that checkpoint, since the binding will not make it again.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["SelfCalls"]


class SelfCalls:
    """The numbering of one instance's calls to itself."""

    def __init__(self) -> None:
        self.next = 1  # the number of the next self-call
        self.unacked: collections.deque[tuple[int, bytes]] = collections.deque()

    def number(self, incoming: bytes, logged: int) -> int | None:
        """The number of a new self-call to queue for the log, or None when the log
        holds it already (a replay regenerated it)."""
        seq = self.next
        self.next = seq + 1
        if seq <= logged:
            return None
        self.unacked.append((seq, incoming))
        return seq

    def trim(self, logged: int) -> None:
        """Forget the self-calls the log now holds."""
        unacked = self.unacked
        while unacked and unacked[0][0] <= logged:
            unacked.popleft()

    def snapshot(self) -> dict[str, Any]:
        """For a checkpoint's outputs: the next number and the calls not yet logged."""
        return {"next": self.next, "unacked": [[s, b] for s, b in self.unacked]}

    def restore(self, saved: dict[str, Any], logged: int) -> list[tuple[int, bytes]]:
        """Take back a checkpoint's snapshot; returns the calls made before it that the
        log does not hold, to be logged now (in order; they are kept as not logged)."""
        self.next = int(saved["next"])
        again = [(int(seq), bytes(body)) for seq, body in saved["unacked"]
                 if int(seq) > logged]
        self.unacked.extend(again)
        return again
