"""A job runner's server: the connections from initiators, each a thin asyncio transport
around the sans-IO ``JobConnection`` and the runner's ``ParticipantJobs``.

The hello first (``transport``: the initiator's member id and the terms agreed), then a
``check`` with the jobs held for it; every message goes through the job table, whose
effects are sent, launched (``runner_attempts``) or streamed back (``runner_results``).
Batches an initiator sends to a job are consumed at once (no job takes streamed input
yet): each is answered by a credit grant, which is how a peer sees it was delivered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import ssl
import uuid
from pathlib import Path
from typing import Any

from ambrosia_core.metrics import DURATION_BUCKETS, Histogram
from ambrosia_core.tls import Tls, describe_tls_error

from ._state import Role
from .connection import DEFAULT_BATCH_BYTES, DEFAULT_INITIAL_CREDITS, JobConnection
from .effects import Deliver, Discarded, JobCancelled, JobEffect, JobStarted, Released, Send
from .errors import HelloError, JobProtocolError
from .messages import CheckResponse, FlowControl, JobId, JobMessage
from .participant import ParticipantJobs
from .runner_attempts import AttemptRuns, RunningJob
from .runner_results import InitiatorPeer, ResultStreams
from .spark.registry import JobRegistry
from .transport import Hello, exchange_hello

__all__ = ["DEFAULT_FRAME_SECONDS", "DEFAULT_MAX_CONNECTIONS", "Runner"]

# Initiators are a few coordinators (one per pipeline, two during a failover); 64 leaves
# room for them many times over, and anything past it is a stranger holding sockets.
DEFAULT_MAX_CONNECTIONS = 64
# A linked initiator sends a frame in one write; 30 s for its rest outlasts any pause of a
# loaded host and still frees a connection whose peer stalled mid-frame.
DEFAULT_FRAME_SECONDS = 30.0
log = logging.getLogger("ambrosia_services.jobs.runner")

CLOSE_SECONDS = 5.0  # how long a stop waits for the connections' handlers to end


class Runner(ResultStreams, AttemptRuns):
    """A job runner (what it does with each message: ``runner``'s docstring).

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
        frame_seconds: how long a linked initiator may take to send the rest of a frame
            it began; then it is closed.
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
        self._running: dict[JobId, RunningJob] = {}
        self._peers: dict[uuid.UUID, InitiatorPeer] = {}
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
        peer = InitiatorPeer(initiator, JobConnection(Role.PARTICIPANT, Role.INITIATOR,
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

    def _receive(self, peer: InitiatorPeer, msg: JobMessage) -> None:
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
