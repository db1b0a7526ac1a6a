"""What the demo shows while the pipeline runs: progress lines read from the coordinator's
status file and the sink's committed output, and the samples the plot is drawn from."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from .output import OutputTail
from .pgoutput import PgOutputTail

__all__ = ["Event", "Sample", "Watcher"]


@attrs.frozen
class Sample:
    t: float               # seconds since the start
    applied: int | None    # lines applied by the coordinator (None: no fresh status)
    committed: int         # lines whose counts are in the committed output


@attrs.frozen
class Event:
    t: float
    label: str
    kind: str = "mark"  # "down": the coordinator stops here; "up": it is back


class Watcher:
    """Polls the status file and the committed output; prints a progress block every
    ``every`` seconds through ``say``."""

    def __init__(self, status_file: Path, committed: Path | PgOutputTail, total_lines: int,
                 say: Callable[[str], None], every: float = 3.0) -> None:
        self.status_file = status_file
        # The committed file, or a PostgreSQL sink's tables (``pgoutput``).
        self.tail = OutputTail(committed) if isinstance(committed, Path) else committed
        self.total_lines = total_lines
        self.say = say
        self.every = every
        self.t0 = time.monotonic()
        self.samples: list[Sample] = []
        self.events: list[Event] = []
        self.commit_times: dict[int, float] = {}  # batch -> when its header appeared
        self.report: dict[str, Any] = {}
        self._status_mtime = 0.0
        self._status_seen = 0.0  # when the status file last changed (seconds since start)
        self._last_print = -every

    def now(self) -> float:
        return time.monotonic() - self.t0

    def mark(self, label: str, kind: str = "mark") -> None:
        """Record an event (a crash, a restart) at this moment, for the plot; ``kind``
        "down" and "up" bound a time the coordinator was not running."""
        self.events.append(Event(self.now(), label, kind))

    @property
    def applied_lines(self) -> int:
        """Lines the coordinator had applied at its last status (0 before the first)."""
        streams = self.report.get("streams", {}).values()
        return sum(s.get("lines", s.get("applied", 0)) for s in streams)

    def sources_started(self) -> None:
        """The feeds start now, into a new pipeline: nothing is applied yet (the first
        status file may come after a small corpus has been read whole)."""
        self.samples.append(Sample(self.now(), 0, 0))

    def poll(self) -> None:
        t = self.now()
        for k, _lines, _words in self.tail.poll():
            self.commit_times.setdefault(k, t)
        applied = self._read_status()
        self.samples.append(Sample(t, applied, self.tail.lines))
        if applied is not None:
            self._status_seen = t
        if t - self._last_print >= self.every:
            self._last_print = t
            for line in self.progress():
                self.say(line)

    def _read_status(self) -> int | None:
        """Lines applied per the status file, if it was rewritten since the last look."""
        try:
            mtime = self.status_file.stat().st_mtime
            if mtime == self._status_mtime:
                return None
            report = json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None  # not written yet, or replaced while read: next time
        self._status_mtime = mtime
        self.report = report
        return sum(s.get("lines", s.get("applied", 0)) for s in report.get("streams", {}).values())

    def settle(self, batches: int, timeout: float = 3.0) -> None:
        """Wait (a little) for a status that shows ``batches`` jobs ended: the file is
        rewritten every ``status_seconds``, so the one read when the last batch was
        committed may predate its job's end (it showed "1 running" with all done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read_status()
            jobs = self.report.get("jobs") or {}
            ended = sum(int(jobs.get(k, 0)) for k in ("done", "failed", "cancelled"))
            if ended >= batches and not jobs.get("running") and not jobs.get("waiting"):
                return
            time.sleep(0.1)

    def progress(self) -> list[str]:
        """One line per stream, one for the jobs and the output."""
        t = self.now()
        stale = t - self._status_seen
        head = f"[{t:5.1f}s]"
        streams: Mapping[str, Any] = self.report.get("streams", {})
        lines = [f"{head} stream {Path(s.get('name', sid)).name}: "
                 f"{s.get('lines', s.get('applied', 0)):,} "
                 f"lines in{' (done)' if s.get('closed') else ''}"
                 for sid, s in sorted(streams.items(), key=lambda kv: str(kv[1].get('name')))]
        jobs = self.report.get("jobs") or {}
        job_text = ", ".join(f"{jobs[k]} {k}" for k in ("waiting", "running", "done",
                                                        "failed", "attempts") if k in jobs)
        lines.append(
            f"{head} jobs: {job_text or 'none yet'}; batches committed "
            f"{len(self.tail.headers)} ({self.tail.lines:,}/{self.total_lines:,} lines)"
            + (f"; no status for {stale:.0f} s" if stale > 2 else ""))
        return lines

    def commit_latencies(self) -> list[tuple[float, float]]:
        """Per committed batch, ``(commit time, latency)``: from the first sample in which
        the coordinator had applied every line up to the batch's end to the moment its
        counts appeared in the committed output."""
        out = []
        end = 0
        applied = [(s.t, s.applied) for s in self.samples if s.applied is not None]
        for k, lines, _words in self.tail.headers:
            end += lines
            committed_at = self.commit_times.get(k)
            reached = next((t for t, a in applied if a >= end), None)
            if committed_at is not None and reached is not None and reached <= committed_at:
                out.append((committed_at, committed_at - reached))
        return out
