"""The job protocol's errors, placed in the project's one hierarchy.

Every error says whose fault it was. ``JobRemoteError`` and its subclasses: the peer sent
bytes or messages that break the protocol (only the receive path raises them; a connection
that raised one is broken). ``JobLocalError`` and its subclasses: this side misused the API
(it sends nothing and changes nothing, so the caller may go on). Both derive from the
project's ``RemoteProtocolError`` / ``LocalProtocolError``, so code that already handles
those handles these.
"""

from __future__ import annotations

from ambrosia_core.errors import (
    AmbrosiaError,
    FrameTooLargeError,
    IllegalDirectionError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    SequenceGapError,
    UnexpectedMessageError,
    UnknownMessageTypeError,
    WireFormatError,
)

__all__ = [
    "AttemptReusedError",
    "CommitConflictError",
    "HelloError",
    "JobDefinitionError",
    "JobRunError",
    "PlanError",
    "SparkServerError",
    "StagingIncompleteError",
    "UnknownJobNameError",
    "BatchOrderError",
    "CreditExceededError",
    "DataAfterLastError",
    "IllegalJobTransitionError",
    "JobFrameTooLargeError",
    "JobLocalError",
    "JobMessageDirectionError",
    "JobProtocolError",
    "JobRemoteError",
    "JobWireError",
    "RetentionLimitError",
    "UnexpectedJobMessageError",
    "UnknownJobMessageTypeError",
]


class JobProtocolError(ProtocolError):
    """Base class of every error the job protocol library raises."""


# ------------------------------------------------------------------ the peer's fault


class JobRemoteError(JobProtocolError, RemoteProtocolError):
    """The peer broke the job protocol; the connection (if any) cannot go on."""


class JobWireError(JobRemoteError, WireFormatError):
    """A frame whose bytes cannot be decoded: truncated, trailing bytes, bad field value."""


class JobFrameTooLargeError(JobWireError, FrameTooLargeError):
    """A frame's length prefix claims more than the configured maximum frame size."""


class UnknownJobMessageTypeError(JobWireError, UnknownMessageTypeError):
    """A message type byte that the job protocol does not define."""


class JobMessageDirectionError(JobWireError, IllegalDirectionError):
    """A defined message that the peer's role may not send (e.g. ``start`` from a runner)."""


class BatchOrderError(JobRemoteError, SequenceGapError):
    """A stream's batch numbers did not rise by exactly one (a gap or a repeat)."""


class DataAfterLastError(JobRemoteError, UnexpectedMessageError):
    """A batch arrived on a stream after its ``last`` batch."""


class CreditExceededError(JobRemoteError, UnexpectedMessageError):
    """The sender sent more row bytes on a stream than the receiver had granted."""


class UnexpectedJobMessageError(JobRemoteError, UnexpectedMessageError):
    """A well-formed message that the job's state does not allow (e.g. a second ``start``)."""


class RetentionLimitError(JobRemoteError):
    """Batches for jobs not started yet exceed the retention bound; the batch was refused.

    Attributes:
        job_id: the job whose batch was refused.
    """

    def __init__(self, reason: str, *, job_id: object = None) -> None:
        self.job_id = job_id
        super().__init__(reason)


# ------------------------------------------------------------------ our own fault


class JobLocalError(JobProtocolError, LocalProtocolError):
    """This side misused the job protocol API; nothing was sent and nothing changed."""


class IllegalJobTransitionError(JobLocalError):
    """A local step the job's state does not allow (e.g. finishing a job never started)."""


# ------------------------------------------------------------------ running jobs
# Raised by the runner, the link and the commit rule, not by the sans-IO protocol.


class JobRunError(AmbrosiaError):
    """Base class of the errors met while running, committing or reaching a job."""


class PlanError(JobRunError, ValueError):
    """A ``start`` whose parameters are not a job plan (job key, attempt, arguments)."""


class UnknownJobNameError(JobRunError, LookupError):
    """A ``start`` names a job function no module registered."""


class JobDefinitionError(JobRunError, TypeError):
    """A job function registered wrongly (a name taken twice, not callable, bad name)."""


class StagingIncompleteError(JobRunError):
    """A commit was asked for an attempt whose staging directory has no ``_SUCCESS``."""


class AttemptReusedError(JobRunError):
    """A ``start`` for an attempt launched before: never launch an operation id twice."""


class CommitConflictError(JobRunError):
    """The final directory exists but holds no finished output: someone else wrote there."""


class HelloError(JobRunError, ValueError):
    """A job link's first bytes are not the transport's hello (wrong service or version)."""


class SparkServerError(JobRunError):
    """A Spark process (Connect server, master, worker) failed to start or keeps dying."""
