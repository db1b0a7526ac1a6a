"""The link server's acknowledgements, gathered with no I/O: what each record made
durable lets its senders forget (``Durable.acks``) is kept, the furthest position per
sender, until the batch goes out (``ACK_DELAY`` after its first position, in the shell;
whenever a step says so, in the simulator). Nothing waits for an acknowledgement (it only
lets a sender forget calls), but each one wakes its sender, so those of a moment go out
together, one TrimTo per sender.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["AckBatch"]


class AckBatch:
    """Positions to acknowledge, the furthest per sender, until taken."""

    def __init__(self) -> None:
        self._due: dict[str, int] = {}

    @property
    def pending(self) -> bool:
        """Whether a position waits to go out."""
        return bool(self._due)

    def add(self, positions: Mapping[str, int]) -> None:
        """Each sender's calls are logged up to its position (a position behind one
        already due changes nothing)."""
        due = self._due
        for sender, seq in positions.items():
            if seq > due.get(sender, 0):
                due[sender] = seq

    def take(self) -> dict[str, int]:
        """The positions to send now, per sender; the batch starts empty again."""
        due, self._due = self._due, {}
        return due
