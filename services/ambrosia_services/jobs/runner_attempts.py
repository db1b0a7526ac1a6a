"""A runner's attempts: a ``start`` launched on Spark in a worker thread, its end (committed,
failed, cancelled), and a cancel's ``interruptTag``s.

Part of the runner (``runner_server.Runner``). Spark's client is imported on an attempt's
first use only (``spark.execute``), so that the protocol side loads without it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import attrs

from ambrosia_core.metrics import Histogram

from ._state import JobState
from .attempts import Attempt, RunnerCancelCode, parse_plan
from .effects import JobEffect
from .errors import AttemptReusedError, PlanError, UnknownJobNameError
from .messages import JobId, Start
from .participant import ParticipantJobs
from .spark.registry import JobRegistry

__all__ = ["AttemptRuns", "RunningJob"]

log = logging.getLogger("ambrosia_services.jobs.runner")


def _first_line(err: BaseException) -> str:
    """The error's message on one line, at most 300 characters."""
    text = " ".join(str(err).split())
    return text if len(text) <= 300 else text[:297] + "..."



@attrs.define
class RunningJob:
    """A job this runner is running: its attempt and how far it has got."""

    start: Start
    attempt: Attempt
    cancelled: threading.Event = attrs.Factory(threading.Event)
    committed: bool = False
    began: float = attrs.Factory(time.monotonic)  # when it was launched
    stream: asyncio.Task[None] | None = None
    future: asyncio.Future[Any] | None = None



class AttemptRuns:
    """The runner's attempts (a part of ``Runner``)."""

    jobs: ParticipantJobs
    registry: JobRegistry
    connect: str
    out: Path
    started: int
    ended: dict[str, int]
    durations: dict[str, Histogram]
    _running: dict[JobId, RunningJob]
    _peers: dict[uuid.UUID, Any]  # the result streams' peers (runner_results imports us)
    _pool: concurrent.futures.ThreadPoolExecutor

    def _apply(self, effects: list[JobEffect]) -> None:
        raise NotImplementedError  # the server's

    def _stream(self, peer: Any, job: RunningJob) -> None:
        raise NotImplementedError  # the result streams'

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
        job = self._running[start.job_id] = RunningJob(start, attempt)
        self.started += 1
        log.info("job %s: running %s attempt %s", start.job_id, start.name, attempt)
        from .spark import execute  # Spark's client: see SPARK_EXTRA

        future = asyncio.get_running_loop().run_in_executor(
            self._pool, execute.run_attempt, self.connect, definition, attempt, args,
            self.out, job.cancelled,
        )
        job.future = future
        future.add_done_callback(lambda f: self._finished(job, f))

    def _finished(self, job: RunningJob, future: asyncio.Future[Any]) -> None:
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

    def _ran(self, job: RunningJob, outcome: str) -> None:
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

    async def _interrupt(self, job_id: JobId, job: RunningJob) -> None:
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

