"""The initiator's transport: links from a coordinator to its job runners, over TCP.

A thin asyncio layer around the sans-IO ``InitiatorJobs`` and one ``JobConnection`` per
connection. It keeps a connection to every runner (reconnecting with back-off), sends what
the job table decides, and hands everything that happened to the caller as events, in
order, from ``next_event()`` (or ``async for``), so a coordinator on the primary can turn
each into an Impulse. It imports no pyspark, pandas or pyarrow.

Events: ``Connected(runner)``, ``Disconnected(runner, reason)``, ``Held(runner, active,
lost)`` after each connection's ``check`` (``lost``: jobs this table has running on that
runner that the runner no longer holds, e.g. after a ``kill -9``: ``attempts.reconcile``
tells what to do about each), and the job table's own ``Deliver`` (a result batch),
``JobDone``, ``JobCancelled`` (the runner's cancel request carries why a job failed),
``Discarded``.

Credit: a result batch's bytes are granted back (``flow_control``) when the caller asks
for the event after it, so a slow consumer holds the runners back. A runner that
reconnects streams a committed result again from batch 0: a consumer keeps what it has by
``(job id, batch number)``.

Starts and cancels for a runner that is not connected wait for its next connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.retry import Attempts, Retry
from ambrosia_core.tls import Tls, describe_tls_error

from ._state import InitiatorState, Role
from .attempts import OperationState, Reconciled, reconcile
from .connection import DEFAULT_BATCH_BYTES, DEFAULT_INITIAL_CREDITS, JobConnection
from .effects import Deliver, Discarded, HeldJobs, JobCancelled, JobDone, JobEffect, Send
from .errors import HelloError, JobProtocolError
from .initiator import RESULT_EDGE, InitiatorJobs
from .messages import Cancel, FlowControl, JobId, JobMessage, Start
from .transport import Hello, exchange_hello

__all__ = [
    "Connected",
    "Disconnected",
    "Held",
    "JobLinks",
    "LinkEvent",
    "OperationState",
    "Reconciled",
    "RunnerAddress",
    "reconcile",
]


UNREACHABLE_SAY_EVERY = 60.0  # seconds between warnings about a runner that cannot be reached
log = logging.getLogger("ambrosia_services.jobs.link")


@attrs.frozen
class RunnerAddress:
    """Where a runner listens, and the member id it must say hello with."""

    member: uuid.UUID
    host: str
    port: int

    @property
    def where(self) -> Address:
        """The host and port as one address (shown with an IPv6 host in brackets)."""
        return Address(self.host, self.port)


@attrs.frozen
class Connected:
    runner: uuid.UUID


@attrs.frozen
class Disconnected:
    runner: uuid.UUID
    reason: str


@attrs.frozen
class Held:
    """A runner's ``check`` on a new connection, against this table.

    ``active``: jobs it holds that we run. ``lost``: jobs we run on it that it does not
    hold (it restarted, or never got the start): reconcile them.
    """

    runner: uuid.UUID
    active: tuple[JobId, ...]
    lost: tuple[JobId, ...]


LinkEvent = Connected | Disconnected | Held | Deliver | JobDone | JobCancelled | Discarded


class _LinkEndedError(Exception):
    """A connection to a runner ended (closed, refused in its hello, broken): connect
    again after the back-off."""


def _link_retry(cap: float) -> Retry:
    """A runner is dialled again from 50 ms, doubling up to ``cap``, after any connection
    that ended; the back-off resets only when the runner speaks."""
    return Retry(floor=0.05, cap=cap, on=(OSError, _LinkEndedError))


@attrs.define(eq=False)
class _Link:
    address: RunnerAddress
    conn: JobConnection | None = None
    writer: asyncio.StreamWriter | None = None
    queued: list[Start | Cancel] = attrs.Factory(list)
    started_here: set[JobId] = attrs.Factory(set)  # starts sent on this connection
    # Its connections, under the links' declared retry (``_link_retry``).
    attempts: Attempts = attrs.field(kw_only=True)
    failing_since: float | None = None  # when connecting began to fail, this streak
    said_at: float = 0.0  # when that was last said


class JobLinks:
    """An initiator's links to its runners.

    Args:
        jobs: the coordinator's job table (its member id is what we say hello with).
        runners: every runner's address.
        initial_credits: the starting byte credit offered to each runner in the hello (a
            connection uses the smaller of its two ends' offers).
        batch_bytes: the largest batch offered (likewise, the smaller offer wins).
        max_backoff: the longest wait between connection attempts.
        tls: dial the runners over TLS, checking that each runner's certificate names
            the host dialled and showing ours (None: plain TCP).
    """

    def __init__(
        self,
        jobs: InitiatorJobs,
        runners: Iterable[RunnerAddress],
        *,
        initial_credits: int = DEFAULT_INITIAL_CREDITS,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        max_backoff: float = 2.0,
        tls: Tls | None = None,
    ) -> None:
        self.jobs = jobs
        self.tls = tls
        self.hello = Hello(jobs.member_id, initial_credits, batch_bytes)
        self.max_backoff = max_backoff
        self._links = {r.member: _Link(r, attempts=Attempts(_link_retry(max_backoff)))
                       for r in runners}
        self._events: asyncio.Queue[tuple[LinkEvent, JobConnection | None]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._to_grant: tuple[uuid.UUID, JobConnection, Deliver] | None = None

    # ------------------------------------------------------------ life
    async def __aenter__(self) -> JobLinks:
        self.open()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def open(self) -> None:
        """Start keeping a connection to every runner."""
        for link in self._links.values():
            self._tasks.append(asyncio.get_running_loop().create_task(self._maintain(link)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def connected(self, runner: uuid.UUID) -> bool:
        return self._links[runner].conn is not None

    # ------------------------------------------------------------ decisions
    def start(
        self, name: str, params: dict[str, Any], participants: Sequence[uuid.UUID],
        *, local_id: int | None = None,
    ) -> JobId:
        """Start a job on ``participants`` (each must be a known runner), with the local
        id ``local_id`` when the caller's state decided it (``InitiatorJobs.start``)."""
        unknown = [p for p in participants if p not in self._links]
        if unknown:
            raise ValueError(f"no link to runner(s) {', '.join(map(str, unknown))}")
        job_id, effects = self.jobs.start(name, params, participants, local_id=local_id)
        self._apply(effects)
        return job_id

    def cancel(self, job_id: JobId, error_code: int = 0, message: str = "cancelled") -> None:
        """Cancel a running job on every participant (``JobCancelled`` follows as an event)."""
        self._apply(self.jobs.cancel(job_id, error_code, message))

    # ------------------------------------------------------------ events
    async def next_event(self) -> LinkEvent:
        """The next event; asking for it grants back the credit of the previous batch."""
        self._grant()
        event, conn = await self._events.get()
        if isinstance(event, Deliver) and conn is not None and event.batch.edge == RESULT_EDGE:
            self._to_grant = (event.source, conn, event)
        return event

    async def __aiter__(self) -> AsyncIterator[LinkEvent]:
        while True:
            yield await self.next_event()

    def _grant(self) -> None:
        if self._to_grant is None:
            return
        runner, conn, deliver = self._to_grant
        self._to_grant = None
        link = self._links[runner]
        batch = deliver.batch
        if link.conn is conn and link.writer is not None and batch.rows and not batch.last:
            grant = FlowControl(batch.job_id, batch.edge, len(batch.rows))
            write_unless_closing(link.writer, conn.send(grant))

    def _emit(self, event: LinkEvent, conn: JobConnection | None = None) -> None:
        self._events.put_nowait((event, conn))

    # ------------------------------------------------------------ sending
    def _apply(self, effects: list[JobEffect], conn: JobConnection | None = None) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._send(effect.to, effect.message)
            elif isinstance(effect, HeldJobs):
                self._emit(self._held(effect))
            elif isinstance(effect, (Deliver, JobDone, JobCancelled, Discarded)):
                self._emit(effect, conn)

    def _send(self, to: uuid.UUID, message: JobMessage) -> None:
        link = self._links[to]
        if link.conn is None or link.writer is None:
            if isinstance(message, (Start, Cancel)):
                link.queued.append(message)
            return
        write_unless_closing(link.writer, link.conn.send(message))
        if isinstance(message, Start):
            link.started_here.add(message.job_id)

    def _held(self, held: HeldJobs) -> Held:
        link = self._links[held.participant]
        mine = {
            r.job_id
            for r in self.jobs.records()
            if r.state is InitiatorState.RUNNING
            and held.participant in r.participants
            and held.participant not in r.results_ended
        }
        lost = mine - set(held.active) - link.started_here
        return Held(held.participant, held.active, tuple(sorted(lost)))

    # ------------------------------------------------------------ connections
    async def _maintain(self, link: _Link) -> None:
        """Keep a connection to ``link``'s runner: each connection is an attempt under
        ``link.attempts`` (it always ends with an error: ``_LinkEndedError`` when the
        runner closed it or broke the conversation)."""
        await link.attempts.run(lambda: self._connection(link))

    async def _connection(self, link: _Link) -> None:
        address = link.address
        try:
            if self.tls is None:
                reader, writer = await asyncio.open_connection(address.host, address.port)
            else:
                reader, writer = await self.tls.connect(address.host, address.port)
        except OSError as err:  # a TlsHandshakeError too: it names the certificate
            # Said at once, then once a minute while it lasts: jobs for this runner
            # wait for it, and a silent wait looks like a hang.
            now = time.monotonic()
            if link.failing_since is None or now - link.said_at >= UNREACHABLE_SAY_EVERY:
                link.failing_since = now if link.failing_since is None else link.failing_since
                link.said_at = now
                log.warning("cannot reach runner %s at %s (%s) for %.0f s; jobs for it "
                            "wait, retrying", address.member, address.where,
                            err.strerror or err, now - link.failing_since)
            raise
        if link.failing_since is not None:
            log.info("runner %s at %s reached after %.0f s", address.member,
                     address.where, time.monotonic() - link.failing_since)
            link.failing_since = None
        reason = "closed by the runner"
        try:
            terms = await exchange_hello(reader, writer, self.hello)
            if terms.peer != address.member:
                raise HelloError(
                    f"runner at {address.where} is {terms.peer}, "
                    f"not {address.member}"
                )
            await self._serve(link, reader, writer, terms.credits)
        except (HelloError, JobProtocolError) as err:
            reason = str(err)
            log.warning("link to runner %s: %s", address.member, err)
        except ssl.SSLError as err:  # an altered, replayed or cut TLS record
            reason = describe_tls_error(err)
            log.warning("link to runner %s: %s", address.member, reason)
        except OSError as err:
            reason = f"connection lost: {err}"
        finally:
            self._ended(link, writer, reason)
        raise _LinkEndedError(reason)

    def _ended(self, link: _Link, writer: Any, reason: str) -> None:
        """A connection to ``link``'s runner ended (``reason``): it holds nothing of this
        life's starts, and the owner hears of it once, if it was open."""
        was_open = link.conn is not None
        link.conn = None
        link.writer = None
        link.started_here.clear()
        writer.close()
        if was_open:
            self._emit(Disconnected(link.address.member, reason))

    async def _serve(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        credits: int,
    ) -> None:
        runner = link.address.member
        conn = JobConnection(Role.INITIATOR, Role.PARTICIPANT, initial_credits=credits)
        link.conn, link.writer = conn, writer
        self._emit(Connected(runner))
        queued, link.queued = link.queued, []
        for message in queued:
            self._send(runner, message)
        while data := await reader.read(65536):
            conn.receive_data(data)
            for msg in conn.events():
                link.attempts.progress()  # the runner speaks: real progress
                effects = self.jobs.handle(runner, msg)
                self._apply(effects, conn)
                for effect in effects:
                    if isinstance(effect, JobDone):
                        conn.release_job(effect.job_id)
                    elif isinstance(effect, JobCancelled):
                        conn.release_job(effect.cancel.job_id)
            await writer.drain()
