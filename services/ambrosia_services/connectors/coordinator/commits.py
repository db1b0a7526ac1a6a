"""Commit latency as the primary sees it: for each sink transaction, from the moment its
oldest output byte was emitted to the moment the sink's commit went out (Phase2 with the
state's decision).

The state already keeps, per sink, the logged time its oldest uncut byte was emitted
(``SinkRecord.uncut_since``), and clears it when it cuts a transaction. The clock reads the
records after every run of inputs applied (``observe``), carries that time over to the
transaction cut from those bytes, and gives it back to the bytes when the transaction
aborts (they are cut again; their wait goes on). Nothing here changes the state, and a
new primary starts a new clock: a transaction it finds already cut counts from the moment
it first saw it.

What is measured goes to a bounded list of recent commits (for the status file and its
page) and to listeners (the metrics' histogram).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import attrs

from .core import SinkRecord

__all__ = ["Commit", "CommitClock"]

#: Commits kept for the status report.
KEEP_RECENT = 256


@attrs.frozen
class Commit:
    """One committed transaction: when (wall-clock seconds), which sink, how long its
    oldest byte waited for the commit, and how many bytes it carried."""

    at: float
    sink: str
    latency: float
    size: int


@attrs.define
class _Open:
    start: float
    size: int


class CommitClock:
    """Commit latency of every sink's transactions (one clock per primary life)."""

    def __init__(self, keep: int = KEEP_RECENT) -> None:
        self._oldest: dict[str, float] = {}  # sink -> emit time of its oldest uncut byte
        self._open: dict[tuple[str, str], _Open] = {}  # (sink, txn id) -> its start
        self.recent: collections.deque[Commit] = collections.deque(maxlen=keep)
        self.listeners: list[Callable[[Commit], None]] = []
        self.commits = 0

    def summary(self) -> dict[str, float | int | None]:
        """For the status report: commits measured, and the last, median and slowest
        latency (milliseconds) of the recent ones."""
        latencies = sorted(c.latency for c in self.recent)
        if not latencies:
            return {"commits": self.commits, "last_ms": None, "p50_ms": None,
                    "max_ms": None}
        return {"commits": self.commits,
                "last_ms": round(self.recent[-1].latency * 1e3, 1),
                "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 1),
                "max_ms": round(latencies[-1] * 1e3, 1)}

    def observe(self, name: str, rec: SinkRecord, now: float) -> None:
        """Look at ``name``'s record after inputs were applied (``now``: wall clock)."""
        if rec.txn_id and (name, rec.txn_id) not in self._open:
            # Cut since the last look. Emitted and cut in one run of inputs (a batch
            # flushed as it is emitted): it starts now. An abort the state decided
            # before this cut hands its start on: its bytes are in this transaction.
            start = self._oldest.pop(name, now)
            for key in [k for k in self._open if k[0] == name]:
                if rec.decided.get(key[1]) is False:
                    start = min(start, self._open.pop(key).start)
            self._open[(name, rec.txn_id)] = _Open(start, rec.txn_end - rec.committed)
        if rec.uncut and name not in self._oldest:
            # The logged emit time when the state keeps it (0 marks bytes an abort made
            # overdue: their start was given back by ``decided``).
            since = rec.uncut_since
            self._oldest[name] = since / 1e9 if since else now

    def decided(self, name: str, txn_id: str, commit: bool, now: float) -> Commit | None:
        """Phase2 went out for ``txn_id``: a commit is measured and returned; an abort
        gives its start back to the sink's uncut bytes."""
        opened = self._open.pop((name, txn_id), None)
        if opened is None:
            return None
        if not commit:
            # Its bytes are uncut again and older than anything emitted since.
            self._oldest[name] = min(opened.start, self._oldest.get(name, opened.start))
            return None
        done = Commit(now, name, max(now - opened.start, 0.0), opened.size)
        self.commits += 1
        self.recent.append(done)
        for listener in self.listeners:
            listener(done)
        return done
