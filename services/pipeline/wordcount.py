"""``WordCountPipeline``: word counts per micro-batch of source lines, on Spark, committed
to every sink exactly once and in batch order.

Applied source lines go into the current micro-batch (state). A batch is cut, in a
handler, when it holds ``batch_lines`` lines or ``BATCH_BYTES`` bytes of text (so that its
job request stays well within the runners' 16 MiB frame limit however long the lines),
or at a ``job_tick`` once its first line is ``batch_seconds`` old (logged time), and
becomes job ``wordcount`` with the lines as its arguments. Results are emitted strictly
in batch order (a later batch whose job finished first waits), each as::

    #batch\t<k>\t<lines>\t<words>\n
    <word>\t<count>\n           (one per word, sorted by word)

Words follow ``words.words``. A batch whose job failed every attempt is emitted as
``#failed\t<k>\t<lines>\n`` so that the batches after it are not held back for ever.

Run: ``ambrosia run services.pipeline:WordCountPipeline -i NAME --config FILE``.
"""

from __future__ import annotations

from typing import Any, Final

from .coordinator import SparkCoordinator

__all__ = ["BATCH_BYTES", "WordCountPipeline", "format_batch"]

# The most bytes the lines of one batch take in its job request (their UTF-8 and msgpack's
# 5-byte string header each, at most): a runner refuses a frame over 16 MiB
# (``services.jobs.DEFAULT_MAX_FRAME_SIZE``), and the request's own fields are small.
BATCH_BYTES: Final = 12 << 20


def _request_bytes(line: str) -> int:
    # isascii() is a flag lookup: the common case costs no encoding.
    return 5 + (len(line) if line.isascii() else len(line.encode()))


def format_batch(k: int, lines: int, rows: list[tuple[str, int]]) -> bytes:
    """One batch's output: the header, then ``word\\tcount`` rows sorted by word."""
    ordered = sorted(rows)
    total = sum(c for _, c in ordered)
    text = f"#batch\t{k}\t{lines}\t{total}\n" + "".join(f"{w}\t{c}\n" for w, c in ordered)
    return text.encode()


class WordCountPipeline(SparkCoordinator):
    """Source lines -> micro-batches -> Spark word counts -> sinks, each batch once."""

    needs_runners = True
    needs_sinks = True

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[str] = []  # the current micro-batch's lines
        self.pending_since: int | None = None  # logged time (ns) of its first line
        self.cut = 0  # batches cut so far (the last k)
        self.batches: dict[int, list[Any]] = {}  # k -> [job key, lines], until emitted
        self.results: dict[int, bytes] = {}  # k -> formatted output waiting its turn
        self.emitted = 0  # the last k emitted
        self._pending_bytes = 0  # of the pending lines: derived, not checkpointed

    # ------------------------------------------------------------ decisions
    def on_messages(self, stream_id: int, messages: Any) -> None:
        limit = int(self.jobs.settings.get("batch_lines", 2000))
        for message in messages:
            for line in message.payload.decode("utf-8", "replace").splitlines():
                if not self.pending:
                    self.pending_since = self._now_ns()
                self.pending.append(line)
                self._pending_bytes += _request_bytes(line)
                if len(self.pending) >= limit or self._pending_bytes >= BATCH_BYTES:
                    self._cut()

    def wants_job_tick(self, now_ns: int) -> bool:
        return bool(self.pending) and self._old_enough(now_ns)

    def on_job_tick(self) -> None:
        if self.pending and self._old_enough(self._now_ns()):
            self._cut()

    def _old_enough(self, now_ns: int) -> bool:
        age = float(self.jobs.settings.get("batch_seconds", 1.0)) * 1e9
        return self.pending_since is not None and now_ns - self.pending_since >= age

    def _cut(self) -> None:
        self.cut += 1
        key = self.submit_job("wordcount", {"lines": self.pending})
        self.batches[self.cut] = [key, len(self.pending)]
        self.pending = []
        self.pending_since = None
        self._pending_bytes = 0

    def _k_of(self, key: str) -> int | None:
        return next((k for k, (job, _) in self.batches.items() if job == key), None)

    def on_job_result(self, key: str, rows: list[Any]) -> None:
        k = self._k_of(key)
        if k is None:
            return
        lines = self.batches[k][1]
        self.results[k] = format_batch(k, lines, [(r["word"], r["count"]) for r in rows])
        self._emit_ready()

    def on_job_failed(self, key: str, reason: str) -> None:
        super().on_job_failed(key, reason)
        k = self._k_of(key)
        if k is not None:
            self.results[k] = f"#failed\t{k}\t{self.batches[k][1]}\n".encode()
            self._emit_ready()

    def _emit_ready(self) -> None:
        while self.emitted + 1 in self.results:
            self.emitted += 1
            data = self.results.pop(self.emitted)
            del self.batches[self.emitted]
            for sink in self.core.settings["sinks"]:
                self.emit(sink, data)

    # ------------------------------------------------------------ state
    def checkpoint_state(self) -> Any:
        state = super().checkpoint_state()
        state["wordcount"] = [self.pending, self.pending_since, self.cut,
                              [[k, v] for k, v in self.batches.items()],
                              [[k, v] for k, v in self.results.items()], self.emitted]
        return state

    def load_state(self, state: Any) -> None:
        super().load_state(state)
        pending, since, cut, batches, results, emitted = state["wordcount"]
        self.pending, self.pending_since, self.cut = list(pending), since, cut
        self._pending_bytes = sum(map(_request_bytes, self.pending))
        self.batches = {k: list(v) for k, v in batches}
        self.results = {k: bytes(v) for k, v in results}
        self.emitted = emitted

    def state_status(self) -> dict[str, Any]:
        status = super().state_status()
        status["batches"] = {"cut": self.cut, "emitted": self.emitted,
                             "waiting": len(self.results), "pending_lines": len(self.pending)}
        return status
