"""Which calls of a linked sender's records are new: the link server's rule, without I/O.

A sender numbers its calls 1, 2, ... and sends them in records, each naming the number of
its last call and how many calls it holds. After a reconnection it sends again from the
position the handshake named, so a record may hold calls that were accepted already: only
the new ones are taken (the record's body without its first frames), a record with none
is dropped, and a record that starts past the next call expected (a gap: a call would be
lost) is refused. A sender's position starts at what the log holds and moves with every
record taken, before it is logged, so a record that arrives again meanwhile (on another
connection of the same sender) is not taken twice.
"""

from __future__ import annotations

from collections.abc import Callable

from ambrosia_core.errors import UnexpectedMessageError

from .frames import skip_frames

__all__ = ["LinkIntake"]


class LinkIntake:
    """Per sender, the last call taken; ``take`` decides for one record.

    Args:
        logged: the last call number the log holds from a sender (0: none); asked once
            per sender, for its first record.
    """

    def __init__(self, logged: Callable[[str], int]) -> None:
        self._logged = logged
        self._taken: dict[str, int] = {}

    def position(self, sender: str) -> int:
        """The last call taken from ``sender`` (or logged, before its first record)."""
        found = self._taken.get(sender)
        return self._logged(sender) if found is None else found

    def take(self, sender: str, seq_id: int, calls: int, body: bytes) -> bytes | None:
        """The frames of a record to queue: all of ``body`` when it starts at the next
        call, the new ones when it overlaps what was taken, None when it holds nothing
        new. ``body`` holds ``calls`` checked frames, the last one call ``seq_id``.

        Raises:
            UnexpectedMessageError: the record starts after the next call expected (the
                link is broken; nothing is taken from it).
        """
        taken = self.position(sender)
        if seq_id <= taken:
            return None
        first = seq_id - calls + 1
        if first > taken + 1:
            raise UnexpectedMessageError(f"link calls {first}..{seq_id} from {sender} after "
                                         f"{taken}")
        self._taken[sender] = seq_id
        return body if first == taken + 1 else skip_frames(body, taken + 1 - first)
