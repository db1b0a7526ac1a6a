"""The word-count pipeline against Spark Structured Streaming: same corpus, same micro-batch
size, same Spark master (``local[2]``), in the same run, one after the other.

Both count the words of one generated corpus (``samples.pipeline.corpus.write_corpus``,
3 files) per micro-batch by the same rule (``ambrosia_services.pipeline.words``), and both outputs
are checked against a plain Python count of the corpus (``check_output``: every batch once,
in order, all lines covered, merged counts equal). A run that fails its check is reported
as FAILED and gives no figure to the harness.

**The pipeline** (``samples/pipeline/run_pipeline.py``'s ``Pipeline``: a local[2] Spark
Connect server, 2 job runners, the 2PC file sink, ``ambrosia run
wordcount`` and one feed per corpus file), with no crash and no
upgrade. The Connect server is warmed by the reference recount first, as the demo does.
The feeds start on empty files; once each is connected the corpus is appended to them
whole (or, with ``--feed-rate R``, R lines a second to each, every 0.2 s). Its config is
the demo's, plus ``max_batch_lines = B``, so that every micro-batch holds at most B lines
(``batch_lines`` is B too) and the number of batches matches Structured Streaming's
(``--adaptive`` leaves the pipeline's own cut, which takes everything waiting when Spark is
behind, and gives Structured Streaming the pipeline's mean batch size instead).

**The baseline**: ``bench/ss_wordcount.py`` in a child process: a classic local[2]
SparkSession (no Spark Connect), warmed by a batch count of the corpus,
``spark.readStream.text(dir)`` with ``maxFilesPerTrigger``, the same word rule,
``foreachBatch`` writing each batch's ``groupBy("word").count()`` as JSON, a
``checkpointLocation``, the default trigger. The corpus, in order, is cut into files of B
lines, all in the watched directory before the query starts and one file per trigger
(with ``--feed-rate``: a file of 3R x 0.2 lines renamed in every 0.2 s, the same total rate
as the pipeline's three feeds, and as many files per trigger as make B lines).

What is measured, per system (wall-clock times):

- lines/s: corpus lines / (last batch committed - first line available). Available: the
  moment the corpus is appended to the connected feeds' files (pipeline), or
  ``writeStream.start()`` is called (Structured Streaming; with ``--feed-rate``, the
  first file renamed in). Process and JVM start-up and the warm-ups are outside both.
- commit latency p50/p99 over the batches: from when the batch's last line was available
  (the first moment the lines available, counted in order, covered the batch's end) to
  when the batch was committed. Committed: its header appeared in the sink's ``committed``
  file (that file's mtime when the poll, every 50 ms, saw it) for the pipeline; its
  trigger ended (the commit log is written inside ``triggerExecution``: progress
  timestamp + duration, from a ``StreamingQueryListener``) for Structured Streaming.
  Without ``--feed-rate`` every line is available at the start, so this is mostly
  queueing: batch k waits for the k - 1 before it. The pipeline's batches hold lines of
  three streams in the order the coordinator applied them, so with ``--feed-rate`` the
  cumulative count is an approximation of when a batch's lines were sent.
- batch time p50/p99: from a batch's cut to its commit. Pipeline: the first status file
  (rewritten every 0.5 s: that is the resolution) whose ``batches.cut`` reached it;
  Structured Streaming: ``triggerExecution``. Also, for the pipeline, the latency from
  the status in which the coordinator had applied (received and logged) the batch's lines.
- binding peak RSS: VmHWM of the coordinator's binding (the ``ambrosia run`` process that
  holds the immortal) just before it is stopped; the coordinator process's is in
  ``extra``.

Usage (each size runs the pipeline, then Structured Streaming)::

    python bench/bench_pipeline.py                      # 60,000 and 1,500,000 lines
    python bench/bench_pipeline.py --lines 60000        # one size (repeatable)
    python bench/bench_pipeline.py --large              # adds 6,000,000 lines
    python bench/bench_pipeline.py --lines 60000 --feed-rate 2000   # throttled feeds

``python bench/run.py --only pipeline`` runs 60,000 and 1,500,000 lines (``--quick``:
60,000). Standalone, the results go to ``bench/results-pipeline.json`` (``--out``) in
the shape of ``bench/results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from samples.pipeline.corpus import count_words, write_corpus  # noqa: E402
from samples.pipeline.output import (  # noqa: E402
    Batch,
    OutputTail,
    check_output,
    parse_output,
)
from samples.pipeline.procs import Child, ChildError, interrupt_between_starts  # noqa: E402
from samples.pipeline.run_pipeline import Pipeline, free_port  # noqa: E402

SIZES = (60_000, 1_500_000)
LARGE = 6_000_000
FILES = 3  # corpus files, one feed each (the demo's default)
RUNNERS = 2  # job runners (the demo's default)
MASTER = "local[2]"
TICK = 0.2  # seconds between two appends (or files) of a throttled feed
POLL = 0.05  # seconds between two looks at the sink's output and the status file
SS_SCRIPT = HERE / "ss_wordcount.py"


def default_batch_lines(lines: int) -> int:
    """The demo's micro-batch size: a twentieth of the corpus (200 at least)."""
    return max(200, lines // 20)


# ----------------------------------------------------------------------------- figures
@dataclass
class BatchTimes:
    """One committed micro-batch (wall-clock seconds since the epoch; None: not known)."""

    lines: int
    committed: float
    available: float | None = None  # its last line was available to the system
    began: float | None = None  # it was cut (pipeline) / its trigger started (SS)
    received: float | None = None  # the coordinator had applied its last line (pipeline)


@dataclass
class Measured:
    """One system's run over one corpus."""

    system: str
    lines: int
    start: float  # the first line was available
    batches: list[BatchTimes]
    verdict: str
    ok: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(b.committed for b in self.batches) - self.start

    @property
    def rate(self) -> float:
        return self.lines / self.seconds

    def latencies(self, since: str) -> list[float]:
        """Per batch, seconds from its ``since`` moment (an attribute) to its commit."""
        out = []
        for b in self.batches:
            at = getattr(b, since)
            if at is not None:
                out.append(b.committed - at)
        return out

    def summary(self) -> dict[str, Any]:
        commit = self.latencies("available")
        batch = self.latencies("began")
        received = self.latencies("received")
        return {
            "lines_per_s": self.rate, "seconds": self.seconds, "batches": len(self.batches),
            "mean_batch_lines": self.lines / len(self.batches),
            "commit_p50_s": percentile(commit, 0.5), "commit_p99_s": percentile(commit, 0.99),
            "batch_p50_s": percentile(batch, 0.5), "batch_p99_s": percentile(batch, 0.99),
            "received_p50_s": percentile(received, 0.5),
            "received_p99_s": percentile(received, 0.99),
            # Growth over the run: the same figure over the first and the second half.
            "received_p99_halves_s": [percentile(received[:len(received) // 2], 0.99),
                                      percentile(received[len(received) // 2:], 0.99)],
            "commit_p99_halves_s": [percentile(commit[:len(commit) // 2], 0.99),
                                    percentile(commit[len(commit) // 2:], 0.99)],
            "verdict": self.verdict, **self.extra,
            "per_batch_columns": ["lines", "available", "began", "received", "committed"],
            "per_batch": [[b.lines, *(_rel(t, self.start) for t in (
                b.available, b.began, b.received, b.committed))] for b in self.batches],
        }


def _rel(t: float | None, start: float) -> float | None:
    """Seconds since ``start`` (None stays None)."""
    return None if t is None else round(t - start, 4)


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (None for no values): with 20 batches, p99 is the max."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class Schedule:
    """When lines became available: (time, lines available so far), in time order."""

    def __init__(self) -> None:
        self.points: list[tuple[float, int]] = []

    def add(self, t: float, total: int) -> None:
        self.points.append((t, total))

    @property
    def start(self) -> float:
        return self.points[0][0]

    def reached(self, end: int) -> float | None:
        """The first time at least ``end`` lines were available."""
        return next((t for t, total in self.points if total >= end), None)


def first_reaching(samples: list[tuple[float, int]], end: int) -> float | None:
    """The first sample time whose value is at least ``end``."""
    return next((t for t, v in samples if v >= end), None)


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM (peak resident set) of ``pid`` in MB, or None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# ----------------------------------------------------------------------------- input
def corpus_lines(paths: list[Path]) -> Iterator[bytes]:
    """Every line of the corpus, file after file."""
    for path in paths:
        with open(path, "rb") as f:
            yield from f


def write_chunks(paths: list[Path], directory: Path, chunk: int) -> list[tuple[Path, int]]:
    """The corpus cut into files of ``chunk`` lines in ``directory`` (names in order);
    returns each file and its lines."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = corpus_lines(paths)
    out: list[tuple[Path, int]] = []
    for i in itertools.count():
        piece = list(itertools.islice(lines, chunk))
        if not piece:
            return out
        path = directory / f"chunk-{i:06d}.txt"
        path.write_bytes(b"".join(piece))
        out.append((path, len(piece)))
    raise AssertionError("unreachable")


class Appender:
    """Appends the corpus files to the feeds' files: whole (``rate`` None) or ``rate``
    lines a second to each, every ``TICK`` seconds; records a ``Schedule``."""

    def __init__(self, sources: list[Path], targets: list[Path], rate: float | None) -> None:
        self.sources = sources
        self.targets = targets
        self.per_tick = None if rate is None else max(1, round(rate * TICK))
        self.schedule = Schedule()
        self.total = 0
        self._readers: list[IO[bytes]] = []
        self._next = 0.0
        self.done = False

    def begin(self) -> None:
        now = time.time()
        if self.per_tick is None:
            for source, target in zip(self.sources, self.targets, strict=True):
                with open(source, "rb") as src, open(target, "ab") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                        self.total += chunk.count(b"\n")
            self.schedule.add(now, self.total)
            self.done = True
            return
        self._readers = [open(s, "rb") for s in self.sources]  # noqa: SIM115 (closed in close)
        self._next = now
        self.poll()

    def poll(self) -> None:
        """Append what is due by now."""
        while not self.done and time.time() >= self._next:
            added = 0
            for reader, target in zip(self._readers, self.targets, strict=True):
                piece = list(itertools.islice(reader, self.per_tick))
                if piece:
                    with open(target, "ab") as out:
                        out.write(b"".join(piece))
                    added += len(piece)
            if not added:
                self.done = True
                break
            self.total += added
            self.schedule.add(time.time(), self.total)
            self._next += TICK

    def close(self) -> None:
        for reader in self._readers:
            reader.close()


# ----------------------------------------------------------------------------- pipeline
def _add_keys(config: Path, keys: dict[str, str]) -> None:
    """Add top-level keys (values as TOML literals) to the demo's config."""
    text = config.read_text()
    head, sep, tables = text.partition("\n[")
    if not sep:
        raise RuntimeError(f"{config}: no table where one was expected")
    added = "".join(f"{k} = {v}\n" for k, v in keys.items())
    config.write_text(f"{head}\n{added}[{tables}")


def run_pipeline(paths: list[Path], work: Path, lines: int, batch_lines: int,
                 expected: Counter[str], *, feed_rate: float | None, adaptive: bool,
                 timeout: float, say: Any, settings: dict[str, str] | None = None) -> Measured:
    """One run of the pipeline over ``paths`` (no crashes, no upgrade)."""
    from ambrosia_services.jobs.spark import ConnectServer

    from samples.pipeline.recount import spark_recount

    run_dir = work / "pipeline"
    run_dir.mkdir(parents=True)
    server = ConnectServer(free_port(), master=MASTER, log_dir=run_dir / "logs")
    p: Pipeline | None = None
    appender: Appender | None = None
    try:
        say(f"pipeline: starting a Spark Connect server ({MASTER}) and warming it with the "
            "reference recount")
        server.start()
        t = time.perf_counter()
        recount = spark_recount(server.url, paths)
        warm_s = time.perf_counter() - t
        p = Pipeline(run_dir, paths, server.url, RUNNERS, batch_lines)
        keys = {} if adaptive else {"max_batch_lines": str(batch_lines)}
        keys.update(settings or {})
        if keys:
            _add_keys(run_dir / "pipeline.toml", keys)
        for child in (p.sink, *p.runners):
            child.start()
        for child in (p.sink, *p.runners):
            child.wait_for("listening on")
        p.start_coordinator()
        for fed in p.fed:
            fed.parent.mkdir(parents=True, exist_ok=True)
            fed.write_bytes(b"")
        for feed in p.feeds:
            feed.start()
        for feed in p.feeds:
            feed.wait_for("connected to")
        say(f"pipeline: {lines:,} lines, batches of {batch_lines:,} "
            f"{'(adaptive cut)' if adaptive else '(at most)'}, "
            + ("fed whole" if feed_rate is None else f"fed {feed_rate:g} lines/s per feed"))
        committed = p.sink_dir / "committed"
        tail = OutputTail(committed)
        commit_at: dict[int, float] = {}
        applied: list[tuple[float, int]] = []  # (status written, lines applied)
        backlog: list[int] = []  # staged bytes not yet committed, per status
        cut: list[tuple[float, int]] = []  # (status written, batches cut)
        status_mtime = 0.0
        appender = Appender(paths, p.fed, feed_rate)
        appender.begin()
        deadline = time.monotonic() + timeout
        while tail.lines < lines:
            appender.poll()
            new = tail.poll()
            if new:
                at = committed.stat().st_mtime
                for k, _n, _w in new:
                    commit_at.setdefault(k, at)
            with contextlib.suppress(OSError, ValueError):
                mtime = p.status_file.stat().st_mtime
                if mtime != status_mtime:
                    report = json.loads(p.status_file.read_text())
                    status_mtime = mtime
                    applied.append((mtime, sum(s.get("lines", s.get("applied", 0)) for s in
                                               report.get("streams", {}).values())))
                    staged = report.get("staged")
                    if isinstance(staged, dict) and "backlog_bytes" in staged:
                        backlog.append(int(staged["backlog_bytes"]))
                    if isinstance(report.get("batches"), dict) and "cut" in report["batches"]:
                        cut.append((mtime, int(report["batches"]["cut"])))
            for child in (p.coordinator, *p.runners, p.sink, *p.feeds):
                if not child.alive():
                    raise ChildError(f"{child.name} ended: {child.last_line()} "
                                     f"(log {child.log})")
            if time.monotonic() > deadline:
                raise ChildError(f"timed out after {timeout:g} s with {tail.lines:,} of "
                                 f"{lines:,} lines committed")
            time.sleep(POLL)
        binding_mb = peak_rss_mb(p.coordinator.pid)
        try:
            coordinator_mb = peak_rss_mb(p.coordinator_process())
        except ChildError:
            coordinator_mb = None
        p.stop()
    finally:
        if appender is not None:
            appender.close()
        if p is not None:
            p.stop()
        server.stop()
    found, problems = parse_output(committed.read_bytes())
    verdict = check_output(found, problems, expected, lines)
    schedule = appender.schedule
    batches = []
    end = 0
    for b in found:
        end += b.lines
        batches.append(BatchTimes(
            b.lines, commit_at.get(b.number, committed.stat().st_mtime),
            available=schedule.reached(end), began=first_reaching(cut, b.number),
            received=first_reaching(applied, end)))
    extra = {"binding_peak_rss_mb": binding_mb, "coordinator_peak_rss_mb": coordinator_mb,
             "warm_s": warm_s, "runners": RUNNERS,
             "backlog_peak_mb": max(backlog, default=0) / 2**20,
             "spark_recount_equal": recount == expected}
    return Measured("pipeline", lines, schedule.start, batches, verdict.line, verdict.ok, extra)


# ----------------------------------------------------------------------------- baseline
def _ss_output(out: Path, report: list[dict[str, Any]]) -> tuple[list[Batch], list[str]]:
    """The foreachBatch output, as the pipeline's batches (numbered by batch id)."""
    batches, problems = [], []
    for b in report:
        directory = out / f"batch-{b['id']:06d}"
        if not (directory / "_SUCCESS").exists():
            problems.append(f"batch {b['id']}: no committed output in {directory}")
            continue
        counts: dict[str, int] = {}
        for part in sorted(directory.glob("part-*.json")):
            for line in part.read_text().splitlines():
                row = json.loads(line)
                if row["word"] in counts:
                    problems.append(f"batch {b['id']}: {row['word']!r} twice")
                counts[row["word"]] = counts.get(row["word"], 0) + int(row["count"])
        batches.append(Batch(b["id"], b["rows"], sum(counts.values()), counts))
    return batches, problems


def run_structured_streaming(paths: list[Path], work: Path, lines: int, batch_lines: int,
                             expected: Counter[str], *, feed_rate: float | None,
                             files_per_batch: float | None, timeout: float,
                             say: Any) -> Measured:
    """One run of the Structured Streaming baseline (``ss_wordcount.py``) over ``paths``.
    ``files_per_batch``: lines per micro-batch in files of ``batch_lines`` (adaptive:
    the pipeline's mean batch over ``batch_lines``); None: one file per batch."""
    run_dir = work / "structured-streaming"
    source, staged = run_dir / "source", run_dir / "staged"
    source.mkdir(parents=True)
    if feed_rate is None:
        chunk = batch_lines
        max_files = max(1, round(files_per_batch or 1))
        chunks = write_chunks(paths, source, chunk)
    else:
        chunk = max(1, round(feed_rate * FILES * TICK))
        max_files = max(1, round((files_per_batch or 1) * batch_lines / chunk))
        chunks = write_chunks(paths, staged, chunk)
    say(f"structured streaming: {lines:,} lines in {len(chunks)} files of {chunk:,} lines, "
        f"maxFilesPerTrigger {max_files}, classic SparkSession {MASTER}")
    report_file = run_dir / "report.json"
    child = Child("structured-streaming", [
        str(SS_SCRIPT), "--source", str(source), "--out", str(run_dir / "out"),
        "--checkpoint", str(run_dir / "checkpoint"), "--report", str(report_file),
        "--lines", str(lines), "--max-files", str(max_files), "--master", MASTER,
        "--timeout", str(timeout), "--warm", *map(str, paths)],
        run_dir / "structured-streaming.log")
    schedule = Schedule()
    try:
        child.start()
        child.wait_for("query started", timeout=600)
        if feed_rate is not None:
            pending = list(chunks)
            total, due = 0, time.time()
            while pending:
                if time.time() >= due:
                    path, n = pending.pop(0)
                    os.rename(path, source / path.name)
                    total += n
                    schedule.add(time.time(), total)
                    due += TICK
                if not child.alive():
                    break
                time.sleep(min(POLL, max(0.0, due - time.time())))
        if child.wait(timeout + 60) != 0:
            raise ChildError(f"structured streaming failed: {child.last_line()} "
                             f"(log {child.log})")
    finally:
        child.stop()
    report = json.loads(report_file.read_text())
    if feed_rate is None:
        schedule.add(report["start"], lines)
    found, problems = _ss_output(run_dir / "out", report["batches"])
    verdict = check_output(found, problems, expected, lines)
    batches = []
    end = 0
    for b in report["batches"]:
        end += b["rows"]
        batches.append(BatchTimes(b["rows"], b["committed"], available=schedule.reached(end),
                                  began=b["began"]))
    extra = {"warm_s": report["warm_s"], "max_files_per_trigger": max_files,
             "file_lines": chunk, "session": f"classic SparkSession, {MASTER}"}
    return Measured("structured streaming", lines, schedule.start, batches, verdict.line,
                    verdict.ok, extra)


# ----------------------------------------------------------------------------- one size
@dataclass
class Comparison:
    lines: int
    batch_lines: int
    pipeline: Measured
    ss: Measured

    @property
    def ok(self) -> bool:
        return self.pipeline.ok and self.ss.ok


def compare(lines: int, *, batch_lines: int | None = None, feed_rate: float | None = None,
            adaptive: bool = False, timeout: float = 1800.0, work_root: Path | None = None,
            keep: bool = False, say: Any = print,
            settings: dict[str, str] | None = None) -> Comparison:
    """Both systems over one corpus of ``lines`` lines, the pipeline first."""
    batch = batch_lines or default_batch_lines(lines)
    work = Path(tempfile.mkdtemp(prefix=f"bench-pipeline-{lines}-", dir=work_root))
    ok = False
    try:
        paths = write_corpus(work / "corpus", lines, FILES)
        expected = count_words(paths)
        pipeline = run_pipeline(paths, work, lines, batch, expected, feed_rate=feed_rate,
                                adaptive=adaptive, timeout=timeout, say=say,
                                settings=settings)
        say(f"pipeline: {pipeline.rate:,.0f} lines/s, {len(pipeline.batches)} batches; "
            f"{pipeline.verdict}")
        per_batch = (lines / len(pipeline.batches)) / batch if adaptive else None
        ss = run_structured_streaming(paths, work, lines, batch, expected, feed_rate=feed_rate,
                                      files_per_batch=per_batch, timeout=timeout, say=say)
        say(f"structured streaming: {ss.rate:,.0f} lines/s, {len(ss.batches)} batches; "
            f"{ss.verdict}")
        result = Comparison(lines, batch, pipeline, ss)
        ok = result.ok
        return result
    finally:
        if keep or not ok:
            say(f"kept the run directory {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------- reporting
def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:,.0f}"


def table(results: list[Comparison]) -> str:
    head = ("corpus lines", "pipeline lines/s", "SS lines/s", "ratio",
            "pipeline commit p50/p99 ms", "SS commit p50/p99 ms", "batches P/SS",
            "batch time p50 P/SS ms", "binding peak RSS MB")
    rows = [head]
    for c in results:
        p, s = c.pipeline.summary(), c.ss.summary()
        rss = p.get("binding_peak_rss_mb")
        rows.append((
            f"{c.lines:,}", f"{p['lines_per_s']:,.0f}", f"{s['lines_per_s']:,.0f}",
            f"{p['lines_per_s'] / s['lines_per_s']:.2f}",
            f"{_ms(p['commit_p50_s'])} / {_ms(p['commit_p99_s'])}",
            f"{_ms(s['commit_p50_s'])} / {_ms(s['commit_p99_s'])}",
            f"{p['batches']} / {s['batches']}",
            f"{_ms(p['batch_p50_s'])} / {_ms(s['batch_p50_s'])}",
            "-" if rss is None else f"{rss:,.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def spread(values: list[float]) -> tuple[float, float, float]:
    """The median, the least and the greatest of ``values`` (at least one)."""
    ordered = sorted(values)
    n = len(ordered)
    mid = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return mid, ordered[0], ordered[-1]


def ratios(results: list[Comparison]) -> dict[int, dict[str, list[float]]]:
    """Per corpus size, each run's pipeline/SS ratios: lines/s and commit p99 (the
    pipeline's p99 over Structured Streaming's: below 1 is better)."""
    out: dict[int, dict[str, list[float]]] = {}
    for c in results:
        p, s = c.pipeline.summary(), c.ss.summary()
        got = out.setdefault(c.lines, {"lines/s": [], "commit p99": []})
        got["lines/s"].append(p["lines_per_s"] / s["lines_per_s"])
        if p["commit_p99_s"] and s["commit_p99_s"]:
            got["commit p99"].append(p["commit_p99_s"] / s["commit_p99_s"])
    return out


def spread_lines(results: list[Comparison]) -> list[str]:
    """One line per corpus size run more than once: each ratio's median and range."""
    out = []
    for lines, got in ratios(results).items():
        runs = len(got["lines/s"])
        if runs < 2:
            continue
        parts = []
        for name, values in got.items():
            if values:
                mid, lo, hi = spread(values)
                parts.append(f"{name} ratio {mid:.2f} ({lo:.2f}-{hi:.2f})")
        out.append(f"{lines:,} lines, {runs} runs (pipeline, SS, pipeline, SS, ...): "
                   + "; ".join(parts))
    return out


def rows(c: Comparison, **settings: Any) -> list[dict[str, Any]]:
    """The harness's rows for one size (one run each: spread 0)."""
    p, s = c.pipeline.summary(), c.ss.summary()
    extra = {"lines": c.lines, "batch_lines": c.batch_lines, "master": MASTER,
             **settings, "pipeline": p, "structured_streaming": s}
    n = f"{c.lines:,} lines"

    def row(name: str, value: float | None, unit: str, base: float | None) -> dict[str, Any]:
        return {"name": name, "value": value, "unit": unit, "baseline": base,
                "ratio": value / base if value is not None and base else None,
                "spread": 0.0, "extra": extra}

    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    return [
        row(f"word count pipeline, {n}: lines/s (vs Structured Streaming)",
            p["lines_per_s"], "lines/s", s["lines_per_s"]),
        row(f"word count pipeline, {n}: commit latency p50 (vs Structured Streaming)",
            ms(p["commit_p50_s"]), "ms", ms(s["commit_p50_s"])),
        row(f"word count pipeline, {n}: commit latency p99 (vs Structured Streaming)",
            ms(p["commit_p99_s"]), "ms", ms(s["commit_p99_s"])),
        row(f"word count pipeline, {n}: batch time p50 (vs Structured Streaming)",
            ms(p["batch_p50_s"]), "ms", ms(s["batch_p50_s"])),
        row(f"word count pipeline, {n}: binding peak RSS", p["binding_peak_rss_mb"], "MB",
            None),
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """The harness's entry (``bench/run.py``): 60,000 lines, and 1,500,000 unless quick."""
    out: list[dict[str, Any]] = []
    for lines in SIZES[:1] if quick else SIZES:
        c = compare(lines, say=lambda text: print(text, file=sys.stderr, flush=True))
        if not c.ok:
            raise RuntimeError(f"bench_pipeline, {lines:,} lines: pipeline "
                               f"{c.pipeline.verdict}; structured streaming {c.ss.verdict}")
        out += rows(c, feed_rate=None, adaptive=False)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, action="append", default=[], metavar="N",
                        help="a corpus size (repeatable; default 60,000 and 1,500,000)")
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[],
                        help="corpus sizes, comma-separated")
    parser.add_argument("--large", action="store_true", help=f"add {LARGE:,} lines")
    parser.add_argument("--batch-lines", type=int, default=0, metavar="B",
                        help="micro-batch size (default: a twentieth of the corpus)")
    parser.add_argument("--feed-rate", type=float, default=None, metavar="R",
                        help="throttle: R lines/s per feed (3 feeds; SS gets 3R lines/s)")
    parser.add_argument("--adaptive", action="store_true",
                        help="the pipeline cuts its own batches; SS gets their mean size")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="give up on a run after this many seconds")
    parser.add_argument("--dir", type=Path, default=None,
                        help="make run directories under this one (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a top-level key of the pipeline's config, its value as in "
                             "TOML (repeatable), e.g. --set jobs_in_flight=1")
    parser.add_argument("--runs", type=int, default=1, metavar="N",
                        help="runs per size, the two systems in turns (pipeline, SS, "
                             "pipeline, SS, ...); the ratios' medians and ranges are printed")
    parser.add_argument("--out", type=Path, default=HERE / "results-pipeline.json")
    args = parser.parse_args(argv)
    settings = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set {item!r} is not KEY=VALUE")
        settings[key.strip()] = value.strip()
    sizes = [*args.lines, *args.sizes] or list(SIZES)
    if args.large:
        sizes.append(LARGE)
    if min(sizes) < 100 or (args.feed_rate is not None and args.feed_rate <= 0):
        parser.error("sizes must be at least 100 lines, --feed-rate above 0")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    interrupt_between_starts()
    results: list[Comparison] = []
    out: list[dict[str, Any]] = []
    failed = False
    try:
        for lines in sizes:
            for run in range(args.runs):
                c = compare(lines, batch_lines=args.batch_lines or None,
                            feed_rate=args.feed_rate, adaptive=args.adaptive,
                            timeout=args.timeout, work_root=args.dir, keep=args.keep,
                            settings=settings)
                results.append(c)
                failed |= not c.ok
                out += [{**r, "benchmark": "pipeline"}
                        for r in rows(c, feed_rate=args.feed_rate, adaptive=args.adaptive,
                                      config=settings, run=run + 1, runs=args.runs)]
    except ChildError as err:
        print(f"FAILED: {err}", flush=True)
        failed = True
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 130
    if results:
        print(table(results))
        for line in spread_lines(results):
            print(line)
        report = {"python": platform.python_version(),
                  "implementation": platform.python_implementation(),
                  "machine": platform.machine(), "quick": False,
                  "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "results": out}
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"results: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
