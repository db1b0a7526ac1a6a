"""The coordinator's side of ``pipejobs_world``: one life of the real pipeline immortal
(``WordCountPipeline``) on the binding's real engine, as ``pipe_coord`` runs the
connector coordinator, with its primary's two I/O shells replaced where they move bytes.

- The connector's shell (``live.Live``) is ``StagingLive``: the source listener's staging
  (the real ``SegmentWriter`` appends each run the source sends as a block and syncs it
  before the ``receive_staged`` Impulse names it; a re-sent message this life already
  accepted, or at or below the state's point of reference, is dropped first, as
  ``SourceListener._accept`` does) and the collector of staged segments (``Live.collect``'s
  rule: a segment of this instance that no block held by the state, no Impulse not yet
  applied and not the writer's current one needs is deleted).
- The job links' shell is the real ``JobsLive`` on the real ``JobLinks`` and
  ``InitiatorJobs``: only the sockets and the tasks are this world's. Each link's
  connection is served by the real ``JobLinks._serve`` (the real ``JobConnection``, each
  message through ``InitiatorJobs.handle`` and the links' effects), reading from and
  writing to this world's byte queues; what ``JobLinks._connection`` does when a
  connection ends is done here (the link forgets the connection and says
  ``Disconnected``). The events go to the real ``JobsLive._events`` loop, one event a
  step; the sync (``JobsLive.sync``) is taken once after each wake, as ``woken`` takes it;
  each lost start is reconciled once (``JobsLive._reconcile``, on an event loop of this
  world's, reading the real output directory). Every coroutine is stepped by this world:
  where it would wait for a socket or a queue it parks, and resumes at a step drawn by
  the scheduler. The tick timer is not run: nothing here is cut by time (the settings
  cut a batch as soon as a line waits, and jobs never time out).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, cast

from ambrosia_services.connectors.coordinator.records import FROM_START
from ambrosia_services.jobs.connection import DEFAULT_INITIAL_CREDITS
from ambrosia_services.jobs.link import JobLinks
from ambrosia_services.pipeline.live import JobsLive
from ambrosia_services.pipeline.wordcount import WordCountPipeline
from ambrosia_services.staging import SegmentWriter, segment_names

from .pipe_coord import INSTANCE, Coordinator, SimLive

if TYPE_CHECKING:
    from .job_runner import Runner
    from .pipejobs_world import PipeJobsWorld

__all__ = ["JobsCoordinator", "StagingLive"]

Task = Coroutine[Any, Any, Any]


class _Park:
    """What a stepped coroutine awaits where it would wait for I/O: it parks there."""

    def __await__(self) -> Generator[Any, None, None]:
        yield self


def resume(task: Task) -> bool:
    """Run ``task`` until it parks again (True) or ends (False)."""
    try:
        task.send(None)
    except StopIteration:
        return False
    return True


class EventQueue:
    """The links' event queue (``JobLinks._events``): ``get`` parks once each time, so
    that each step of the events loop takes one event."""

    def __init__(self) -> None:
        self.items: collections.deque[Any] = collections.deque()

    def put_nowait(self, item: Any) -> None:
        self.items.append(item)

    async def get(self) -> Any:
        await _Park()
        return self.items.popleft()


class Reader:
    """The coordinator's end of a runner connection, as ``JobLinks._serve`` reads it."""

    def __init__(self) -> None:
        self.data: collections.deque[bytes] = collections.deque()
        self.eof = False

    async def read(self, _n: int) -> bytes:
        while not self.data and not self.eof:
            await _Park()
        return self.data.popleft() if self.data else b""


class Writer:
    """... and as it writes: into the runner's inbox while the connection lasts."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.inbox = runner.inbox  # this connection's: a new one gets a new queue
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed or self.runner.inbox is not self.inbox

    def write(self, data: bytes) -> None:
        self.inbox += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class StagingLive(SimLive):
    """Stands in for ``live.Live`` of a coordinator that stages what it receives: hears
    which Impulses were applied (their segments are no longer busy; the ACK goes)."""

    def applied(self, token: int) -> None:
        coord = cast("JobsCoordinator", self.world.coord)
        coord.inflight.pop(token, None)
        super().applied(token)


class JobsCoordinator(Coordinator):
    """One life of the pipeline: the engine, its staging writer, its job links."""

    immortal = WordCountPipeline
    world: PipeJobsWorld

    def __init__(self, world: PipeJobsWorld) -> None:
        super().__init__(world)
        self.lives = world.lives = world.lives + 1
        self.writer = SegmentWriter(world.staging, f"{INSTANCE}.{self.lives}",
                                    segment_bytes=world.segment_bytes)
        self.accepted: dict[int, int] = {}  # the listener's last id accepted, per stream
        self.inflight: dict[int, str] = {}  # token -> the segment its Impulse names
        self.jobs: JobsLive | None = None
        self.events: Task | None = None  # JobsLive._events, stepped
        self.serving: dict[str, tuple[Task, Reader, Writer]] = {}  # runner -> its link
        self.sync_due = True  # ``woken``: a sync at its start, then after each wake
        self.reconciled: set[tuple[int, str]] = set()
        self._doomed: tuple[Any, list[str]] | None = None

    @property
    def app(self) -> WordCountPipeline:
        return cast(WordCountPipeline, super().app)

    # -- the job links (JobsLive with this world's sockets and tasks)
    def make_jobs(self, owner: Any, cfg: Any) -> JobsLive:
        live = JobsLive(owner, cfg)
        live.links._events = EventQueue()  # type: ignore[assignment]
        woken = live.wake

        def wake() -> None:
            self.sync_due = True
            woken()

        live.wake = wake  # type: ignore[method-assign]
        self.jobs = live
        self.events = live._events()
        resume(self.events)  # it waits for the first event
        return live

    @property
    def links(self) -> JobLinks:
        assert self.jobs is not None
        return self.jobs.links

    def sync(self) -> None:
        assert self.jobs is not None
        self.sync_due = False
        self.jobs.sync()
        self.ic.pump()

    def event(self) -> None:
        assert self.events is not None
        if not resume(self.events):
            self.world.fail("the job links' events loop ended")
        self.ic.pump()

    def reconciles(self) -> list[tuple[int, str]]:
        if self.jobs is None:
            return []
        return [(local, key) for local, key in sorted(self.jobs.reconciling.items())
                if (local, key) not in self.reconciled]

    def reconcile(self, local: int, key: str) -> None:
        assert self.jobs is not None
        self.reconciled.add((local, key))
        self.world.loop.run_until_complete(self.jobs._reconcile(key, local))
        self.ic.pump()

    def connect(self, runner: Runner) -> None:
        """The link reaches ``runner``: ``JobLinks._serve`` serves the connection."""
        runner.open()
        reader, writer = Reader(), Writer(runner)
        link = self.links._links[runner.member]
        task = self.links._serve(link, reader, writer,  # type: ignore[arg-type]
                                 DEFAULT_INITIAL_CREDITS)
        self.serving[runner.name] = (task, reader, writer)
        resume(task)  # linked; the queued starts go; it waits for the runner's bytes
        runner.check()  # the runner's first word on a connection

    def from_runner(self, runner: Runner, data: bytes) -> None:
        task, reader, _ = self.serving[runner.name]
        reader.data.append(data)
        if not resume(task):
            self.world.fail(f"the link to {runner.name} ended on its bytes")
        self.ic.pump()

    def disconnect(self, runner: Runner, reason: str) -> None:
        """The connection to ``runner`` ended: what ``JobLinks._connection`` does then."""
        served = self.serving.pop(runner.name, None)
        if served is None:
            return
        task, reader, writer = served
        reader.eof = True
        if resume(task):
            self.world.fail(f"the link to {runner.name} did not end at the end of its "
                            "connection")
        self.links._ended(self.links._links[runner.member], writer, reason)

    def crash(self) -> None:
        """This life ends: its tasks with it."""
        for task, *_ in self.serving.values():
            task.close()
        self.serving.clear()
        if self.events is not None:
            self.events.close()
        self.writer.close()

    # -- the connector's shell: staging and the collector
    def stage(self, token: int, first: int, payloads: list[bytes]) -> int:
        """The listener takes a run of the source's messages ``first``, ``first + 1``,
        ...: what this life accepted already, or the state applied, is dropped; the rest
        is written as one block, synced, and named by a ``receive_staged`` Impulse.
        Returns how many were dropped."""
        ids = list(range(first, first + len(payloads)))
        last = self.accepted.get(1)
        if last is None:
            rec = self.app.core.streams.get(1)
            last = -1 if rec is None or rec.por == FROM_START else rec.por
        keep = [(i, p) for i, p in zip(ids, payloads, strict=True) if i > last]
        if keep:
            self.accepted[1] = keep[-1][0]
            ref = self.writer.append(1, keep[0][0], keep[-1][0], [p for _, p in keep],
                                     [i for i, _ in keep])
            self.writer.sync()
            self.inflight[token] = ref.segment
            self.impulse("receive_staged", token, [["src", *ref.to_list()]])
        return len(payloads) - len(keep)

    def doomed(self) -> list[str]:
        """The segments the collector deletes now (``Live.collect``'s rule)."""
        # What it depends on: the state, what is busy, the names in the root.
        when = (len(self.world.log), tuple(self.inflight), self.writer.current,
                self.world.counts["segments collected"])
        if self._doomed is None or self._doomed[0] != when:
            names = segment_names(self.world.staging, f"{INSTANCE}.")
            busy = {*self.inflight.values(), self.writer.current}
            held = set(self.app.core.segments)
            self._doomed = (when, [n for n in names if n not in busy and n not in held])
        return self._doomed[1]


def new_loop() -> asyncio.AbstractEventLoop:
    """The loop the reconciliations run on (their reads go to a thread, as on the
    primary)."""
    return asyncio.new_event_loop()
