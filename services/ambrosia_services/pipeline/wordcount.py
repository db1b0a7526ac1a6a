"""``WordCountPipeline``: word counts per micro-batch of source lines, on Spark, committed
to every sink exactly once and in batch order.

The coordinator never holds the lines. What sources send is staged in segment files
(``ambrosia_services.staging``) and the handlers see references to runs of lines (``on_staged``);
a micro-batch is a list of such references, and its job (``wordcount``) is given them, so
Spark's executors read the lines from the segments. A record may hold several lines (the
file feed sends whole lines, one per record or, with ``--message-bytes``, as many as fit);
a line ends at ``\n`` (or at the end of its record), and each staged block says how many
it holds.

A batch is cut, in a handler, when fewer than ``jobs_in_flight`` batch jobs run and either
``batch_lines`` lines wait or the oldest waiting line is ``batch_seconds`` old (logged
time, at a ``job_tick``). It takes every waiting run up to ``max_batch_lines`` lines and
``max_batch_bytes`` bytes (at least one run): when Spark keeps up, batches are about
``batch_lines`` long; when it is behind, the next batch takes what waited meanwhile, as
Structured Streaming's default trigger does, so throughput rises and the latency of a
commit stays bounded. Every boundary is decided from logged inputs, so a replay (and
``repro``) cuts the same batches.

Results are emitted strictly in batch order (a later batch whose job finished first
waits), each as::

    #batch\t<k>\t<lines>\t<words>\n
    <word>\t<count>\n           (one per word, sorted by word)

Words follow ``words.words``. A batch whose job failed every attempt is emitted as
``#failed\t<k>\t<lines>\n`` so that the batches after it are not held back for ever. A
batch's staged blocks are released once its output is committed to every sink; their
segments are then deleted. Replaying the kept history (``repro``) reads no segment: the
jobs' results are in the log.

Run: ``ambrosia run wordcount -i NAME --config FILE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ambrosia_py.errors import UpgradeError
from ambrosia_services.staging import Ref

from .coordinator import SparkCoordinator

__all__ = ["WordCountPipeline", "format_batch"]

_FORMAT = 2  # of the checkpointed state; 1 held the lines themselves


def format_batch(k: int, lines: int, rows: list[tuple[str, int]]) -> bytes:
    """One batch's output: the header, then ``word\\tcount`` rows sorted by word."""
    ordered = sorted(rows)
    total = sum(c for _, c in ordered)
    text = f"#batch\t{k}\t{lines}\t{total}\n" + "".join(f"{w}\t{c}\n" for w, c in ordered)
    return text.encode()


class WordCountPipeline(SparkCoordinator):
    """Source lines -> staged segments -> micro-batches of references -> Spark word counts
    read on the executors -> sinks, each batch once."""

    needs_runners = True
    needs_sinks = True
    uses_staging: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[Ref] = []  # staged runs not yet in a batch, in apply order
        self.pending_lines = 0
        self.pending_bytes = 0
        self.pending_since: int | None = None  # logged time (ns) the oldest one came
        self.cut = 0  # batches cut so far (the last k)
        self.batches: dict[int, list[Any]] = {}  # k -> [job key, lines, refs], until emitted
        self.results: dict[int, bytes] = {}  # k -> formatted output waiting its turn
        self.emitted = 0  # the last k emitted
        # Emitted batches whose output is not yet committed to every sink:
        # [k, {sink: end offset of its output}, refs]; their blocks are released then.
        self.uncommitted: list[list[Any]] = []

    # ------------------------------------------------------------ decisions
    def on_staged(self, stream_id: int, refs: Sequence[Ref]) -> None:
        for ref in refs:
            if not self.pending:
                self.pending_since = self._now_ns()
            self.pending.append(ref)
            self.pending_lines += ref.lines
            self.pending_bytes += ref.size
        self._cut_what_is_due(self._now_ns())

    def wants_job_tick(self, now_ns: int) -> bool:
        return (bool(self.pending) and self._old_enough(now_ns)
                and self._in_flight() < self._setting("jobs_in_flight", 2))

    def on_job_tick(self) -> None:
        self._cut_what_is_due(self._now_ns())

    def _setting(self, name: str, default: Any) -> Any:
        return self.jobs.settings.get(name, default)

    def _in_flight(self) -> int:
        return len(self.batches) - len(self.results)

    def _old_enough(self, now_ns: int) -> bool:
        age = float(self._setting("batch_seconds", 1.0)) * 1e9
        return self.pending_since is not None and now_ns - self.pending_since >= age

    def _cut_what_is_due(self, now_ns: int) -> None:
        while (self.pending and self._in_flight() < self._setting("jobs_in_flight", 2)
               and (self.pending_lines >= self._setting("batch_lines", 2000)
                    or self._old_enough(now_ns))):
            self._cut(now_ns)

    def _cut(self, now_ns: int) -> None:
        most_lines = self._setting("max_batch_lines", 1_000_000)
        most_bytes = self._setting("max_batch_bytes", 256 << 20)
        taken: list[Ref] = []
        lines = size = 0
        for ref in self.pending:
            if taken and (lines + ref.lines > most_lines or size + ref.size > most_bytes):
                break
            taken.append(ref)
            lines += ref.lines
            size += ref.size
        del self.pending[:len(taken)]
        self.pending_lines -= lines
        self.pending_bytes -= size
        self.pending_since = now_ns if self.pending else None
        self.cut += 1
        refs = [r.to_list() for r in taken]
        key = self.submit_job("wordcount", {"staging": self._setting("staging", ""),
                                            "refs": refs})
        self.batches[self.cut] = [key, lines, refs]

    def _k_of(self, key: str) -> int | None:
        return next((k for k, (job, *_) in self.batches.items() if job == key), None)

    def on_job_result(self, key: str, rows: list[Any]) -> None:
        k = self._k_of(key)
        if k is None:
            return
        lines = self.batches[k][1]
        self.results[k] = format_batch(k, lines, [(r["word"], r["count"]) for r in rows])
        self._emit_ready()
        self._cut_what_is_due(self._now_ns())

    def on_job_failed(self, key: str, reason: str) -> None:
        super().on_job_failed(key, reason)
        k = self._k_of(key)
        if k is not None:
            self.results[k] = f"#failed\t{k}\t{self.batches[k][1]}\n".encode()
            self._emit_ready()
            self._cut_what_is_due(self._now_ns())

    def _emit_ready(self) -> None:
        while self.emitted + 1 in self.results:
            self.emitted += 1
            data = self.results.pop(self.emitted)
            _key, _lines, refs = self.batches.pop(self.emitted)
            ends = {}
            for sink in self.core.settings["sinks"]:
                self.emit(sink, data)
                rec = self.core.sinks[sink]
                ends[sink] = rec.committed + len(rec.pending)
            self.uncommitted.append([self.emitted, ends, refs])
        self.on_committed()

    def on_committed(self) -> None:
        """Release the blocks of every batch whose output every sink has committed."""
        done = 0
        for _k, ends, refs in self.uncommitted:
            if any(sink in self.core.sinks and self.core.sinks[sink].committed < end
                   for sink, end in ends.items()):
                break
            self.release([Ref.from_list(r) for r in refs])
            done += 1
        del self.uncommitted[:done]
        # A batch's output is a unit: its transaction is cut at once (and the next one
        # as soon as a sink decided the one before), not at the next tick.
        self.core.flush(self._now_ns())  # the sinks' links start it

    # ------------------------------------------------------------ state
    def checkpoint_state(self) -> Any:
        state = super().checkpoint_state()
        state["wordcount"] = {
            "format": _FORMAT, "pending": [r.to_list() for r in self.pending],
            "pending_since": self.pending_since, "cut": self.cut,
            "batches": [[k, v] for k, v in self.batches.items()],
            "results": [[k, v] for k, v in self.results.items()], "emitted": self.emitted,
            "uncommitted": self.uncommitted}
        return state

    def load_state(self, state: Any) -> None:
        super().load_state(state)
        mine = state["wordcount"]
        if not isinstance(mine, dict) or mine.get("format") != _FORMAT:
            raise UpgradeError(
                f"{type(self).__name__}: this checkpoint was written by a version that held "
                "the lines in its state; finish its batches with that version (or start "
                "this one afresh), it cannot be converted")
        self.pending = [Ref.from_list(r) for r in mine["pending"]]
        self.pending_lines = sum(r.lines for r in self.pending)
        self.pending_bytes = sum(r.size for r in self.pending)
        self.pending_since, self.cut = mine["pending_since"], mine["cut"]
        self.batches = {k: list(v) for k, v in mine["batches"]}
        self.results = {k: bytes(v) for k, v in mine["results"]}
        self.emitted = mine["emitted"]
        self.uncommitted = [list(u) for u in mine["uncommitted"]]

    def state_status(self) -> dict[str, Any]:
        status = super().state_status()
        status["batches"] = {"cut": self.cut, "emitted": self.emitted,
                             "waiting": len(self.results), "running": self._in_flight(),
                             "pending_lines": self.pending_lines,
                             "pending_bytes": self.pending_bytes,
                             "uncommitted": len(self.uncommitted)}
        return status
