"""A runner's result streams: an attempt's committed output, sent to its initiator as
ordered ``batch``es on the result edge within the byte credit it grants.

Part of the runner (``runner_server.Runner``): the output's part files in name order, cut
at line ends into batches of at most the batch agreed in the hellos, the last one flagged;
a stream cut off by a lost connection is sent again from batch 0 when the initiator's
check lists the job as active.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs

from .connection import JobConnection
from .initiator import RESULT_EDGE
from .messages import Batch, JobId, JobMessage
from .participant import ParticipantJobs
from .runner_attempts import RunningJob

__all__ = ["InitiatorPeer", "ResultStreams", "result_chunks"]

log = logging.getLogger("ambrosia_services.jobs.runner")


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



@attrs.define(eq=False)
class InitiatorPeer:
    """One connection from an initiator."""

    member: uuid.UUID
    conn: JobConnection
    writer: asyncio.StreamWriter
    batch_bytes: int  # the largest result batch, as agreed in the hellos
    credit: asyncio.Event = attrs.Factory(asyncio.Event)

    def send(self, message: JobMessage) -> None:
        self.writer.write(self.conn.send(message))


class ResultStreams:
    """The runner's result streaming (a part of ``Runner``)."""

    jobs: ParticipantJobs
    out: Path
    _running: dict[JobId, RunningJob]
    _peers: dict[uuid.UUID, InitiatorPeer]

    def _stream(self, peer: InitiatorPeer, job: RunningJob) -> None:
        task = asyncio.get_running_loop().create_task(self._send_results(peer, job))
        job.stream = task
        task.add_done_callback(lambda t: self._stream_ended(job, t))

    def _stream_ended(self, job: RunningJob, task: asyncio.Task[None]) -> None:
        """A stream that stopped early (its connection broke) is sent again, from batch 0,
        when the initiator reconnects and its check lists the job as active."""
        if job.stream is task:
            job.stream = None
        if not task.cancelled() and (err := task.exception()) is not None:
            log.warning("job %s: result stream stopped: %s", job.start.job_id, err)

    async def _send_results(self, peer: InitiatorPeer, job: RunningJob) -> None:
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

