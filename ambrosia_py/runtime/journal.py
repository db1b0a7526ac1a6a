"""The journal a checkpoint carries while handlers are suspended on ``await``.

A suspended coroutine cannot be serialized, so a checkpoint taken while one is suspended
stores the state from before it began (the snapshot) and every input handled since (the
journal); loading it re-runs those inputs. The journal is dropped only when no handler is
suspended, so a handler that awaits for hours makes every checkpoint grow with every input
in between. This module measures the journal, says when it passes the class's
``journal_warning_bytes`` (at that size, then at each doubling, so a journal that keeps
growing is reported a few times, not at every input), and when it passes
``journal_limit_bytes``.

Sizes count the bytes of each input's arguments plus a small fixed overhead: a function
of the log alone, so a replay reaches every threshold at the same input as the live run.
"""

from __future__ import annotations

from typing import Any

from ..errors import JournalLimitError

__all__ = ["INPUT_OVERHEAD", "Journal", "input_size"]

INPUT_OVERHEAD = 16  # bytes per input for its framing in the checkpoint (msgpack, ids)


def input_size(record: Any) -> int:
    """The bytes one logged input adds to a checkpoint's journal."""
    return INPUT_OVERHEAD + sum(len(f) for f in record if isinstance(f, (bytes, bytearray)))


class Journal:
    """The snapshot and the inputs handled since it, with their size.

    Attributes:
        snapshot: the serialized state from before the first suspended handler began, or
            None while no handler may be suspended.
        records: every input handled since the snapshot, in order.
        size: their size in bytes (``input_size``).
    """

    __slots__ = ("_warn_at", "records", "size", "snapshot")

    def __init__(self) -> None:
        self.snapshot: bytes | None = None
        self.records: list[Any] = []
        self.size = 0
        self._warn_at = 0

    @property
    def active(self) -> bool:
        return self.snapshot is not None

    def begin(self, snapshot: bytes) -> None:
        self.snapshot = snapshot
        self.records = []
        self.size = 0
        self._warn_at = 0

    def add(self, record: Any) -> None:
        self.records.append(list(record))
        self.size += input_size(record)

    def clear(self) -> None:
        self.snapshot = None
        self.records = []
        self.size = 0
        self._warn_at = 0

    def warning_due(self, warn_bytes: int | None) -> bool:
        """True once when the size passes ``warn_bytes``, and once at each doubling."""
        if not warn_bytes or warn_bytes <= 0 or self.size < max(warn_bytes, self._warn_at):
            return False
        self._warn_at = max(warn_bytes, self._warn_at)
        while self._warn_at <= self.size:
            self._warn_at *= 2
        return True

    def over(self, limit_bytes: int | None) -> bool:
        return bool(limit_bytes) and limit_bytes is not None and self.size > limit_bytes

    def warning(self, suspended: str, warn_bytes: int | None) -> str:
        """The warning's one line; ``suspended`` names the suspended handlers."""
        return (f"every checkpoint now carries {len(self.records)} inputs ({self.size} bytes) "
                f"because handlers are suspended: {suspended} (over journal_warning_bytes="
                f"{warn_bytes}; see 'Long-lived work' in the README)")

    def limit_error(self, call: str, limit_bytes: int | None) -> JournalLimitError:
        """The error an abandoned await raises in its handler."""
        return JournalLimitError(
            f"{call} was abandoned: the {len(self.records)} inputs ({self.size} bytes) "
            f"carried since handlers were suspended passed journal_limit_bytes={limit_bytes}")
