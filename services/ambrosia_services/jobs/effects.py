"""What the job tables ask their caller to do, as small frozen classes.

The tables never send: ``Send(to, message)`` asks the caller to pass ``message`` to the
connection with member ``to``. The rest tell the caller (the runner, or the coordinator
immortal) what happened to a job.
"""

from __future__ import annotations

import uuid

import attrs

from .messages import Batch, Cancel, JobId, JobMessage, Start

__all__ = [
    "Deliver",
    "Discarded",
    "JobEffect",
    "HeldJobs",
    "JobCancelled",
    "JobDone",
    "JobStarted",
    "Released",
    "Retained",
    "Send",
]


@attrs.frozen
class Send:
    """Send ``message`` on the connection with member ``to``."""

    to: uuid.UUID
    message: JobMessage


@attrs.frozen
class JobStarted:
    """Participant: a ``start`` arrived; run the job now (then call ``running``)."""

    start: Start


@attrs.frozen
class Deliver:
    """A batch for a running job, from member ``source``, in its stream's order."""

    source: uuid.UUID
    batch: Batch


@attrs.frozen
class Retained:
    """Participant: a batch for a job whose ``start`` has not arrived; kept until it does."""

    source: uuid.UUID
    batch: Batch


@attrs.frozen
class Discarded:
    """A batch for a job that is over (cancelled, done, or unknown to the initiator)."""

    source: uuid.UUID
    batch: Batch


@attrs.frozen
class JobCancelled:
    """The job is cancelled: a participant stops it; the initiator records why."""

    cancel: Cancel


@attrs.frozen
class JobDone:
    """Initiator: every participant ended its result stream; the job is done."""

    job_id: JobId


@attrs.frozen
class Released:
    """Participant: the initiator no longer has these jobs; stop them and free their data."""

    job_ids: tuple[JobId, ...]


@attrs.frozen
class HeldJobs:
    """Initiator: what a participant's ``check`` said it holds, sorted by what we know.

    ``active``: jobs we run (the participant keeps them). ``ended``: jobs we know are
    over. ``unknown``: jobs we never decided on in this life (a failover lost them, or
    another initiator's). The last two are released by our ``check_response``.
    """

    participant: uuid.UUID
    active: tuple[JobId, ...]
    ended: tuple[JobId, ...]
    unknown: tuple[JobId, ...]


JobEffect = (
    Send | JobStarted | Deliver | Retained | Discarded | JobCancelled | JobDone | Released
    | HeldJobs
)
