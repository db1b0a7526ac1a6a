"""A job runner: a long-lived process that runs the coordinator's Spark jobs.

It speaks the job protocol as a *participant* over TCP (a thin asyncio transport around
the sans-IO ``JobConnection`` and ``ParticipantJobs``) and runs jobs on a Spark Connect
server::

    python -m ambrosia_services.jobs.runner --listen 127.0.0.1:P --connect sc://127.0.0.1:Q \
        --jobs MODULE[,MODULE] --member NAME --dir DIR

- ``start``: the plan's job key and attempt name everything Spark sees
  (``attempts.Attempt``); the job runs in a worker thread in a session of its own, writes
  to the attempt's staging directory and is committed by rename; then the committed output
  streams back to the initiator as ordered ``batch``es on the result edge (JSON lines, cut
  at line ends where a line fits a batch), the last one flagged, within the byte credit
  the initiator grants. A start of an attempt whose staging is partial (a runner died
  mid-write) re-attaches to the write while Connect says it runs, then commits it; else
  the start is refused (``ATTEMPT_REUSED``) and the initiator decides a new attempt.
- ``cancel`` (or a ``check_response`` that releases the job): ``interruptTag`` in the
  attempt's session; nothing is committed after it.
- on every connection from an initiator: a ``check`` with the jobs held for it; its
  ``check_response`` lists the active ones, whose committed output is streamed again
  from batch 0 on the new connection (a new primary must see all of it).
- a job that fails is reported by a cancel request (``RunnerCancelCode``).

Batches an initiator sends to a job are consumed at once (no job takes streamed input
yet): each is answered by a credit grant, which is how a peer sees it was delivered.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from ambrosia_core.addresses import Address, address_argument
from ambrosia_core.errors import AddressError, UsageError
from ambrosia_core.metrics import (
    DURATION_BUCKETS,
    Families,
    Histogram,
    MetricsError,
    Source,
    add_metrics_option,
)
from ambrosia_core.metrics import serve as serve_metrics
from ambrosia_core.tls import (
    Tls,
    add_tls_options,
    describe_tls_error,
    tls_from_args,
)

from ._state import JobState, Role
from .attempts import Attempt, RunnerCancelCode, member_id, parse_plan
from .connection import DEFAULT_BATCH_BYTES, DEFAULT_INITIAL_CREDITS, JobConnection
from .effects import Deliver, Discarded, JobCancelled, JobEffect, JobStarted, Released, Send
from .errors import (
    AttemptReusedError,
    HelloError,
    JobDefinitionError,
    JobProtocolError,
    PlanError,
    UnknownJobNameError,
)
from .initiator import RESULT_EDGE
from .messages import Batch, CheckResponse, FlowControl, JobId, JobMessage, Start
from .participant import ParticipantJobs
from .spark.registry import JobRegistry
from .transport import Hello, exchange_hello

__all__ = ["Runner", "main", "result_chunks", "runner_source"]


def _first_line(err: BaseException) -> str:
    """The error's message on one line, at most 300 characters."""
    text = " ".join(str(err).split())
    return text if len(text) <= 300 else text[:297] + "..."


# Initiators are a few coordinators (one per pipeline, two during a failover); 64 leaves
# room for them many times over, and anything past it is a stranger holding sockets.
DEFAULT_MAX_CONNECTIONS = 64
# A linked initiator sends a frame in one write; 30 s for its rest outlasts any pause of a
# loaded host and still frees a connection whose peer stalled mid-frame.
DEFAULT_FRAME_SECONDS = 30.0
log = logging.getLogger("ambrosia_services.jobs.runner")

# Spark's client (pyspark with Connect, pandas, pyarrow) comes with this extra; the module
# loads it on a job's first use (``spark.execute``), ``main`` before it listens.
SPARK_EXTRA = "pip install 'ambrosia-py[spark]'"
CLOSE_SECONDS = 5.0  # how long a stop waits for the connections' handlers to end


def result_chunks(directory: Path, batch_bytes: int) -> Iterator[bytes]:
    """The committed output's rows as batches: its part files in name order, cut at line
    ends so that a batch holds at most ``batch_bytes``; a line longer than that is cut into
    pieces (the receiver joins bytes up to each newline)."""
    pending = bytearray()
    for part in sorted(p for p in directory.iterdir() if not p.name.startswith(("_", "."))):
        with open(part, "rb") as rows:
            for line in rows:
                if len(pending) + len(line) > batch_bytes and pending:
                    yield bytes(pending)
                    pending.clear()
                while len(line) > batch_bytes:
                    yield line[:batch_bytes]
                    line = line[batch_bytes:]
                pending += line
    if pending:
        yield bytes(pending)


@attrs.define
class _Job:
    """A job this runner is running: its attempt and how far it has got."""

    start: Start
    attempt: Attempt
    cancelled: threading.Event = attrs.Factory(threading.Event)
    committed: bool = False
    began: float = attrs.Factory(time.monotonic)  # when it was launched
    stream: asyncio.Task[None] | None = None
    future: asyncio.Future[Any] | None = None


@attrs.define(eq=False)
class _Peer:
    """One connection from an initiator."""

    member: uuid.UUID
    conn: JobConnection
    writer: asyncio.StreamWriter
    batch_bytes: int  # the largest result batch, as agreed in the hellos
    credit: asyncio.Event = attrs.Factory(asyncio.Event)

    def send(self, message: JobMessage) -> None:
        self.writer.write(self.conn.send(message))


class Runner:
    """A job runner (see the module docstring).

    Args:
        member: this runner's member id (what initiators list as a participant).
        registry: the jobs it can run.
        connect: the Spark Connect URL, e.g. ``sc://127.0.0.1:15002``.
        out: the output root (staging and final directories live under it).
        initial_credits: the starting byte credit this runner offers every stream in its
            hello (a connection uses the smaller of its two ends' offers).
        batch_bytes: the largest result batch it offers (the smaller offer wins, and a
            batch is never above the credit agreed).
        workers: jobs that may run at once.
        max_connections: the most connections at once, in their hello or linked; one
            more is closed at once, with one log line.
        tls: serve initiators over TLS, each showing a certificate our CA trusts (None:
            plain TCP, for loopback).
    """

    def __init__(
        self,
        member: uuid.UUID,
        registry: JobRegistry,
        connect: str,
        out: str | os.PathLike[str],
        *,
        initial_credits: int = DEFAULT_INITIAL_CREDITS,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        workers: int = 4,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        frame_seconds: float = DEFAULT_FRAME_SECONDS,
        tls: Tls | None = None,
    ) -> None:
        self.member = member
        self.registry = registry
        self.connect = connect
        self.out = Path(out)
        self.hello = Hello(member, initial_credits, batch_bytes)
        self.jobs = ParticipantJobs(member)
        self._running: dict[JobId, _Job] = {}
        self._peers: dict[uuid.UUID, _Peer] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="job")
        self._server: asyncio.Server | None = None
        self.max_connections = max_connections
        self.frame_seconds = frame_seconds
        # With TLS, an initiator must show a certificate that our CA file trusts before
        # its hello is read: the hello alone would let anyone who reaches the port in.
        self.tls = tls
        self._connections = 0
        # Each connection's handler and its writer, until the handler ends.
        self._handlers: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}
        # For the metrics (``runner_source``): jobs launched, and how each run ended.
        self.started = 0
        self.ended = {"committed": 0, "failed": 0, "cancelled": 0}
        self.durations = {outcome: Histogram(DURATION_BUCKETS) for outcome in self.ended}

    # ------------------------------------------------------------ serving
    async def listen(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Start accepting initiators; returns the port."""
        if self.tls is None:
            self._server = await asyncio.start_server(self._on_connection, host, port)
        else:
            self._server = await self.tls.start_server(
                self._on_connection, host, port,
                refused=lambda why: log.warning("refused a connection: %s", why))
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop accepting, close every connection and wait (a few seconds at most) for
        their handlers to end; jobs still running are left to Spark."""
        if self._server is not None:
            self._server.close()
        for writer in self._handlers.values():
            writer.close()
        if self._handlers:  # each ends as its connection closes
            await asyncio.wait(set(self._handlers), timeout=CLOSE_SECONDS)
        for task in set(self._handlers):  # stuck: cancelled
            task.cancel()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=CLOSE_SECONDS)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def busy(self) -> bool:
        return any(not job.committed for job in self._running.values())

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        where = writer.get_extra_info("peername")
        if self._connections >= self.max_connections:
            log.warning("refused a connection from %s: %d connections are open "
                        "(the most it takes)", where, self._connections)
            writer.close()
            return
        self._connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers[task] = writer
        try:
            await self._serve_connection(reader, writer, where)
        except asyncio.CancelledError:
            # Only a stop cancels a handler (``close``, or asyncio.run ending). Ended
            # quietly: Python 3.11's stream callback calls exception() on a cancelled
            # handler and logs the CancelledError's traceback as an error.
            writer.close()
        finally:
            self._connections -= 1
            self._handlers.pop(task, None)

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter, where: Any) -> None:
        try:
            terms = await exchange_hello(reader, writer, self.hello)
        except (HelloError, OSError) as err:
            log.warning("closing connection from %s: %s", where, err)
            writer.close()
            return
        initiator = terms.peer
        peer = _Peer(initiator, JobConnection(Role.PARTICIPANT, Role.INITIATOR,
                                              initial_credits=terms.credits),
                     writer, terms.batch_bytes)
        old = self._peers.get(initiator)
        if old is not None:
            old.writer.close()
        self._peers[initiator] = peer
        log.info("initiator %s connected from %s", initiator, where)
        try:
            peer.send(self.jobs.check(initiator))
            while True:
                # Between frames an initiator may be idle as long as it likes; the rest
                # of a frame it began must come in time.
                try:
                    async with asyncio.timeout(self.frame_seconds if peer.conn.partial_frame
                                               else None):
                        data = await reader.read(65536)
                except TimeoutError:
                    log.warning("closing connection from initiator %s: the rest of a frame "
                                "not sent within %g s", initiator, self.frame_seconds)
                    break
                if not data:
                    break
                peer.conn.receive_data(data)
                for msg in peer.conn.events():
                    self._receive(peer, msg)
        except JobProtocolError as err:
            log.warning("closing connection from initiator %s: %s", initiator, err)
        except ssl.SSLError as err:
            # An altered, replayed or cut TLS record: nothing of it reached the protocol.
            log.warning("closing connection from initiator %s: %s", initiator,
                        describe_tls_error(err))
        except OSError as err:
            log.info("connection from initiator %s lost: %s", initiator, err)
        finally:
            if self._peers.get(initiator) is peer:
                del self._peers[initiator]
            for job in self._running.values():
                if job.stream is not None and job.start.job_id.initiator == initiator:
                    job.stream.cancel()
                    job.stream = None
            peer.credit.set()
            writer.close()

    def _receive(self, peer: _Peer, msg: JobMessage) -> None:
        if isinstance(msg, FlowControl):
            peer.credit.set()
        self._apply(self.jobs.handle(peer.member, msg))
        if isinstance(msg, CheckResponse):
            for job_id in msg.active:
                job = self._running.get(job_id)
                if job is not None and job.committed and job.stream is None:
                    self._stream(peer, job)

    # ------------------------------------------------------------ effects
    def _apply(self, effects: list[JobEffect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._send(effect.to, effect.message)
            elif isinstance(effect, JobStarted):
                self._launch(effect.start)
            elif isinstance(effect, Deliver):
                if effect.batch.rows:
                    grant = FlowControl(effect.batch.job_id, effect.batch.edge,
                                        len(effect.batch.rows))
                    self._send(effect.source, grant)
            elif isinstance(effect, Discarded):
                log.info("discarded batch %d of ended job %s",
                         effect.batch.number, effect.batch.job_id)
            elif isinstance(effect, JobCancelled):
                self._stop(effect.cancel.job_id)
            elif isinstance(effect, Released):
                for job_id in effect.job_ids:
                    self._stop(job_id)

    def _send(self, to: uuid.UUID, message: JobMessage) -> None:
        peer = self._peers.get(to)
        if peer is None:
            log.info("initiator %s not connected; dropped %s", to, type(message).__name__)
            return
        peer.send(message)

    def _refuse(self, job_id: JobId, code: RunnerCancelCode, err: BaseException) -> None:
        # One line; the traceback (Spark's run to dozens of lines) only at DEBUG level.
        log.warning("job %s: %s: %s", job_id, type(err).__name__, _first_line(err))
        log.debug("job %s: the traceback", job_id, exc_info=err)
        if self.jobs.state(job_id) in (JobState.STARTED, JobState.RUNNING):
            message = f"{type(err).__name__}: {err}"[:1000]
            self._apply(self.jobs.request_cancel(job_id, int(code), message))

    def _launch(self, start: Start) -> None:
        try:
            attempt, args = parse_plan(start.params)
            definition = self.registry.get(start.name)
        except (PlanError, UnknownJobNameError) as err:
            self._refuse(start.job_id, RunnerCancelCode.BAD_PLAN, err)
            return
        self.jobs.running(start.job_id)
        job = self._running[start.job_id] = _Job(start, attempt)
        self.started += 1
        log.info("job %s: running %s attempt %s", start.job_id, start.name, attempt)
        from .spark import execute  # Spark's client: see SPARK_EXTRA

        future = asyncio.get_running_loop().run_in_executor(
            self._pool, execute.run_attempt, self.connect, definition, attempt, args,
            self.out, job.cancelled,
        )
        job.future = future
        future.add_done_callback(lambda f: self._finished(job, f))

    def _finished(self, job: _Job, future: asyncio.Future[Any]) -> None:
        job_id = job.start.job_id
        if future.cancelled():  # the runner is stopping: its initiator reconciles it later
            self._running.pop(job_id, None)
            log.info("job %s: not finished, the runner stops", job_id)
            return
        err = future.exception()
        if job.cancelled.is_set() or self._running.get(job_id) is not job:
            self._ran(job, "cancelled")
            self._running.pop(job_id, None)
            log.info("job %s: stopped after its cancel (%s)", job_id,
                     "nothing committed" if err is not None else "already committed")
            return
        if err is not None:
            from .spark import execute

            self._ran(job, "failed")
            self._running.pop(job_id, None)
            code = (RunnerCancelCode.ATTEMPT_REUSED if isinstance(err, AttemptReusedError)
                    else RunnerCancelCode.CONNECT_FAILED if execute.connect_failed(err)
                    else RunnerCancelCode.JOB_FAILED)
            self._refuse(job_id, code, err)
            return
        job.committed = True
        self._ran(job, "committed")
        log.info("job %s: %s", job_id, future.result().value)
        peer = self._peers.get(job_id.initiator)
        if peer is not None:
            self._stream(peer, job)

    def _ran(self, job: _Job, outcome: str) -> None:
        """A job's run on Spark ended (its output committed, failed, or cancelled)."""
        self.ended[outcome] += 1
        self.durations[outcome].observe(time.monotonic() - job.began)

    def _stop(self, job_id: JobId) -> None:
        job = self._running.pop(job_id, None)
        if job is None:
            return
        job.cancelled.set()
        if job.stream is not None:
            job.stream.cancel()
        if not job.committed and job.future is not None:
            asyncio.get_running_loop().create_task(self._interrupt(job_id, job))

    async def _interrupt(self, job_id: JobId, job: _Job) -> None:
        """``interruptTag`` each second until the attempt's thread returns.

        Measured: an interrupt that lands while the server is still planning the write
        (before its Spark job exists) can be lost: the operation reads as interrupted,
        later interrupts find nothing, and the write runs to its end. Its output is then
        never committed (``cancelled`` is checked before the rename), but the work is
        spent; repeating costs one cheap call a second and catches the cases where the
        operation is still listed.
        """
        assert job.future is not None
        from .spark import execute

        loop = asyncio.get_running_loop()
        while not job.future.done():
            try:
                ids = await loop.run_in_executor(
                    None, execute.cancel_attempt, self.connect, job.attempt)
                log.info("job %s: interruptTag %s -> %s", job_id, job.attempt.tag, ids)
            except Exception as err:  # the server may be gone: the attempt dies with it
                log.warning("job %s: interruptTag %s failed: %s", job_id, job.attempt.tag, err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(job.future), 1.0)

    # ------------------------------------------------------------ results
    def _stream(self, peer: _Peer, job: _Job) -> None:
        task = asyncio.get_running_loop().create_task(self._send_results(peer, job))
        job.stream = task
        task.add_done_callback(lambda t: self._stream_ended(job, t))

    def _stream_ended(self, job: _Job, task: asyncio.Task[None]) -> None:
        """A stream that stopped early (its connection broke) is sent again, from batch 0,
        when the initiator reconnects and its check lists the job as active."""
        if job.stream is task:
            job.stream = None
        if not task.cancelled() and (err := task.exception()) is not None:
            log.warning("job %s: result stream stopped: %s", job.start.job_id, err)

    async def _send_results(self, peer: _Peer, job: _Job) -> None:
        job_id = job.start.job_id
        final = job.attempt.final(self.out)
        chunks = result_chunks(final, peer.batch_bytes)
        rows = next(chunks, b"")
        number = 0
        while True:
            following = next(chunks, None)
            while peer.conn.send_credit(job_id, RESULT_EDGE) < len(rows):
                peer.credit.clear()
                await peer.credit.wait()
                if self._peers.get(peer.member) is not peer:
                    return
            self.jobs.check_send(job_id)
            peer.send(Batch(job_id, RESULT_EDGE, number, rows, following is None))
            await peer.writer.drain()
            if following is None:
                break
            rows, number = following, number + 1
        self.jobs.finish(job_id)
        peer.conn.release_job(job_id)
        self._running.pop(job_id, None)
        log.info("job %s: %d result batches sent", job_id, number + 1)


def runner_source(runner: Runner, member: str) -> Source:
    """The runner's metrics, read from its counters at scrape time (on the exposition
    server's thread)."""
    def read(f: Families) -> None:
        name = {"member": member}
        f.counter("ambrosia_runner_jobs_started", "Jobs launched on Spark", runner.started,
                  **name)
        for outcome, n in dict(runner.ended).items():
            f.counter("ambrosia_runner_jobs_ended", "Job runs ended: output committed, "
                      "failed, or cancelled", n, outcome=outcome, **name)
            f.histogram("ambrosia_runner_job_duration_seconds", "From a job's launch to the "
                        "end of its run on Spark", runner.durations[outcome], outcome=outcome,
                        **name)
        jobs = list(runner._running.values())
        f.gauge("ambrosia_runner_jobs_running", "Jobs launched and not yet committed, "
                "failed or cancelled", sum(not job.committed for job in jobs), **name)
        f.gauge("ambrosia_runner_jobs_held", "Jobs this runner holds (running, or their "
                "committed output being streamed)", len(jobs), **name)
        f.gauge("ambrosia_runner_connections", "Initiators connected", runner._connections,
                **name)
    return read


async def _serve(args: argparse.Namespace, registry: JobRegistry) -> bool:
    runner = Runner(member_id(args.member), registry, args.connect, args.dir,
                    workers=args.workers, tls=args.tls)
    metrics = serve_metrics(args.metrics, [runner_source(runner, args.member)])
    try:
        return await _run(runner, args, registry)
    finally:
        if metrics is not None:
            metrics.close()


async def _run(runner: Runner, args: argparse.Namespace, registry: JobRegistry) -> bool:
    # Asked before the line that says it listens, so that a stop sent on that line is
    # an ordinary stop too: one line, exit 0.
    stop = asyncio.Event()
    asked: list[str] = []

    def on_signal(name: str) -> None:
        asked.append(name)
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum.name)
    host = args.listen.host
    port = await runner.listen(host, args.listen.port)
    print(f"runner {args.member} ({runner.member}) listening on {Address(host, port)}"
          f"{' over TLS' if args.tls is not None else ''}; jobs: "
          f"{', '.join(registry.names())}", flush=True)
    watch = asyncio.ensure_future(_watch_connect(args.connect))
    await stop.wait()
    log.info("stopping (%s)", asked[0])
    watch.cancel()
    busy = runner.busy()
    await runner.close()
    return busy


CONNECT_CHECK_SECONDS = 30.0  # how often an unreachable Spark Connect is tried again


async def _watch_connect(url: str) -> None:
    """Says at start, and whenever it changes, whether Spark Connect can be reached: a
    runner cut off from Spark takes jobs that cannot run (the pyspark client retries for
    minutes), and a silent one looked hung."""
    where = url.removeprefix("sc://").split("/", 1)[0].split(";", 1)[0]
    try:
        address = Address.parse(where, what="")
    except AddressError:
        log.warning("cannot tell where Spark Connect is from %s; not checked", url)
        return
    reachable: bool | None = None
    while True:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(address.host, address.port), 5)
            writer.close()
            now, why = True, ""
        except (OSError, TimeoutError) as err:
            now, why = False, (os.strerror(err.errno) if isinstance(err, OSError)
                               and err.errno else type(err).__name__)
        if now != reachable:
            if now:
                log.info("Spark Connect at %s is reachable", address)
            else:
                log.warning("cannot reach Spark Connect at %s (%s): jobs wait for it, "
                            "and the coordinator's job_timeout_seconds ends those that wait "
                            "too long; tried again every %g s", address, why,
                            CONNECT_CHECK_SECONDS)
            reachable = now
        await asyncio.sleep(CONNECT_CHECK_SECONDS)


PROG = "python -m ambrosia_services.jobs.runner"


def _refused(err: Exception | str) -> int:
    """A refusal, as every command says one: one line after the command's name, exit 1
    (2 stays argparse's, for arguments it cannot parse)."""
    print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
    return 1


def _missing_spark_client() -> str | None:
    """What of Spark's client cannot be imported ("pyspark", "Pandas >= 2.2.0"), or None:
    it is loaded here, once, so that a runner without the ``spark`` extra says so in one
    line. pyspark names a missing or old dependency of its own in a ``PySparkImportError``
    (PACKAGE_NOT_INSTALLED, with the package and its least version)."""
    try:
        from .spark import execute  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name is None or err.name.startswith("ambrosia_"):
            raise  # one of ours: a bug, not a missing extra
        return err.name.split(".")[0]
    except ImportError as err:
        said = getattr(err, "getMessageParameters", lambda: None)() or {}
        package = said.get("package_name")
        if not package:
            raise
        least = said.get("minimum_version")
        return f"{package} >= {least}" if least else str(package)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG,
                                     description="Run Spark jobs for a job protocol initiator.")
    parser.add_argument("--listen", required=True,
                        type=address_argument(allow_port_zero=True, default_host="127.0.0.1"),
                        help="HOST:PORT (:PORT for 127.0.0.1; port 0 picks one)")
    parser.add_argument("--connect", required=True, help="Spark Connect URL sc://host:port")
    parser.add_argument("--jobs", required=True, help="MODULE[,MODULE] with @spark_job functions")
    parser.add_argument("--member", required=True, help="this runner's member name")
    parser.add_argument("--dir", required=True,
                        help="the output root directory (its attempts' staging and final "
                             "directories)")
    parser.add_argument("--workers", type=int, default=4,
                        help="jobs that may run at once; more wait for one to end "
                             "(default 4)")
    add_metrics_option(parser, what="the runner's")
    add_tls_options(parser)
    args = parser.parse_args(argv)
    missing = _missing_spark_client()
    if missing is not None:
        return _refused(f"the job runner needs {missing}, part of Spark's client: "
                        f"{SPARK_EXTRA}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        options = tls_from_args(args)
        options.check_listen(args.listen.host, "the runner", log.warning)
        args.tls = options.load()
    except UsageError as err:
        return _refused(err)
    os.environ.pop("MASTER", None)  # PySpark reads it, and .remote() then fails
    try:
        registry = JobRegistry.from_modules(m for m in args.jobs.split(",") if m)
    except JobDefinitionError as err:
        return _refused(err)
    try:
        busy = asyncio.run(_serve(args, registry))
    except MetricsError as err:
        return _refused(err)
    if busy:
        # Jobs still running belong to the Connect server now; waiting for their threads
        # (or for SparkSession.__del__) could hang the exit.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
