"""Run one job attempt on Spark Connect and commit it; cancel one by its tag.

Called from a runner's worker thread (blocking calls). The attempt's session, tag,
operation id and directories all come from ``Attempt``; the write goes to the staging
directory with ``mode("error")`` (``errorifexists`` is refused through Connect) and the
commit is ``attempts.commit``'s rename. Sessions are stopped explicitly: after an
uncaught exception, interpreter exit can hang in ``SparkSession.__del__``.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql.connect.dataframe import DataFrame
from pyspark.sql.connect.session import SparkSession

from ..attempts import Attempt, CommitOutcome, OperationState, commit, is_finished
from ..errors import AttemptReusedError, JobDefinitionError, JobRunError
from . import _connect_internals as internals
from .registry import JobDefinition

__all__ = [
    "REATTACH_POLL_SECONDS",
    "AttemptCancelledError",
    "StagedInputError",
    "cancel_attempt",
    "operation_state",
    "run_attempt",
]


class AttemptCancelledError(JobRunError):
    """The attempt was cancelled while it ran; nothing was committed."""


def run_attempt(
    connect: str,
    definition: JobDefinition,
    attempt: Attempt,
    args: dict[str, Any],
    out: str | os.PathLike[str],
    cancelled: threading.Event,
) -> CommitOutcome:
    """Run the attempt's job into its staging directory, then commit it.

    A staging directory that is already finished (a runner died between write and
    commit) is committed without running again; a committed job is not run again.

    Raises:
        AttemptCancelledError: ``cancelled`` was set before the commit.
        AttemptReusedError: the attempt was launched before and Connect no longer runs
            its operation (failed, cancelled, or forgotten by a restarted server, its
            staging unfinished): never launch an operation id twice; start a new attempt.
        JobDefinitionError: the job function did not return a DataFrame.
        Exception: whatever Spark or the job function raised.
    """
    if is_finished(attempt.final(out)):
        return CommitOutcome.ALREADY_COMMITTED
    staging = attempt.staging(out)
    if not is_finished(staging):
        _write(connect, definition, attempt, args, staging, cancelled)
    if cancelled.is_set():
        raise AttemptCancelledError(f"attempt {attempt} was cancelled; its output is not committed")
    return commit(attempt, out)


log = logging.getLogger("ambrosia_services.jobs.spark.execute")

REATTACH_POLL_SECONDS = 0.5
_ALIVE = (OperationState.RUNNING, OperationState.TERMINATING)


def _launched_before(session: SparkSession, attempt: Attempt, staging: Path) -> OperationState:
    """What Connect says of the attempt's operation before it is sent: anything but
    UNKNOWN (or a staging directory left behind) means it was launched before.
    Measured: a runner killed just after Connect reported the write RUNNING can leave no
    staging directory for many seconds, so the directory alone cannot tell.

    Raises:
        AttemptReusedError: the attempt's session was closed (its id is refused for ever).
        PySparkException: Connect failed otherwise (the attempt fails; nothing was sent).
    """
    if not internals.available():
        return OperationState.UNKNOWN
    try:
        return internals.operation_state(session, attempt.operation_id)
    except PySparkException as err:
        # Measured: a session id never used is SESSION_NOT_FOUND (its first request
        # creates it); a released or timed-out one is SESSION_CLOSED, for ever.
        if "INVALID_HANDLE.SESSION_NOT_FOUND" in str(err):
            return OperationState.UNKNOWN
        if "INVALID_HANDLE.SESSION_CLOSED" in str(err):
            raise AttemptReusedError(f"attempt {attempt}'s Connect session was closed; "
                                     "start a new attempt") from None
        raise


def _reattach(session: SparkSession, attempt: Attempt, staging: Path,
              cancelled: threading.Event, state: OperationState) -> None:
    """Wait for an orphaned write of ``attempt`` (its runner died) while Connect runs it,
    until its staging is finished. Returns when it is (or when ``cancelled`` is set: the
    caller refuses to commit); raises ``AttemptReusedError`` when the operation no longer
    runs and left the staging unfinished."""
    log.info("attempt %s was launched before (its operation is %s): re-attached, not "
             "sent again", attempt, state.value)
    while not cancelled.is_set() and not is_finished(staging) and state in _ALIVE:
        cancelled.wait(REATTACH_POLL_SECONDS)
        state = internals.operation_state(session, attempt.operation_id)
    if is_finished(staging) or cancelled.is_set():
        return
    raise AttemptReusedError(
        f"attempt {attempt} was launched before ({staging} holds no finished output) and "
        f"its operation is {state.value}; start a new attempt"
    )


def _write(
    connect: str,
    definition: JobDefinition,
    attempt: Attempt,
    args: dict[str, Any],
    staging: Path,
    cancelled: threading.Event,
) -> None:
    session = internals.new_session(connect, attempt.session_id)
    try:
        state = _launched_before(session, attempt, staging)
        if state is not OperationState.UNKNOWN or staging.exists():
            _reattach(session, attempt, staging, cancelled, state)
            return
        session.addTag(attempt.tag)
        if definition.records:
            from .staged import staged_records

            frame = definition.function(session, staged_records(session, args), args)
        else:
            frame = definition.function(session, args)
        if not isinstance(frame, DataFrame):
            raise JobDefinitionError(
                f"job {definition.name!r} returned {type(frame).__name__}, not a DataFrame"
            )
        if cancelled.is_set():
            raise AttemptCancelledError(f"attempt {attempt} was cancelled before its write")
        os.makedirs(staging.parent, exist_ok=True)
        writer = frame.write.mode("error")
        if internals.available():
            with internals.with_operation_id(session, attempt.operation_id):
                writer.json(str(staging))
        else:
            writer.json(str(staging))
    except Exception as err:
        if cancelled.is_set():
            raise AttemptCancelledError(f"attempt {attempt} was cancelled while it ran") from None
        staged = _staged_input_problem(err)
        if staged:
            raise StagedInputError(f"attempt {attempt}: {staged}; nothing of it is "
                                   "committed") from None
        raise
    finally:
        session.stop()


class StagedInputError(JobRunError):
    """A staged segment the job reads is missing or damaged (the one line names it)."""


_STAGED = re.compile(r"(SegmentMissingError|SegmentDamagedError): (staged segment [^\n]*)")


def _staged_input_problem(err: BaseException) -> str:
    """The executor's own line when ``err`` is a staged segment's problem, else ''."""
    found = _STAGED.search(str(err))
    return f"{found.group(1)}: {found.group(2).strip()}" if found else ""


def cancel_attempt(connect: str, attempt: Attempt) -> list[str]:
    """Interrupt every operation carrying the attempt's tag, from a session joined to the
    attempt's own (``interruptTag`` from another session finds nothing). Returns the
    interrupted operation ids (none if it had not started or was over)."""
    with internals.join_session(connect, attempt.session_id) as session:
        return list(session.interruptTag(attempt.tag))


def operation_state(connect: str, attempt: Attempt) -> OperationState:
    """``GetStatus`` of the attempt's write; UNKNOWN when the internals are unavailable,
    the session was closed, or the server does not know it (a restarted server forgets
    every operation)."""
    if not internals.available():
        return OperationState.UNKNOWN
    try:
        with internals.join_session(connect, attempt.session_id) as session:
            return internals.operation_state(session, attempt.operation_id)
    except PySparkException as err:
        # A released or timed-out session's id is refused for ever (INVALID_HANDLE):
        # whatever ran in it is over.
        if "INVALID_HANDLE" in str(err):
            return OperationState.UNKNOWN
        raise


# What Spark Connect says when it, not the job, failed: a server that crashed or restarted
# (the operation and its response are gone), or one that cannot be reached.
_CONNECT_FAILURES = ("RESPONSE_ALREADY_RECEIVED", "OPERATION_NOT_FOUND", "StatusCode.UNAVAILABLE",
                     "failed to connect to all addresses", "Connection refused",
                     "Socket closed", "INVALID_HANDLE.SESSION_CLOSED")


def connect_failed(err: BaseException) -> bool:
    """Whether ``err`` is Spark Connect failing under an attempt rather than the job
    failing: a new attempt then runs, and the job's own attempts are not used up by
    crashes of the server (three of them during one batch failed it)."""
    if isinstance(err, internals.RelaunchRefusedError):
        return True
    text = str(err)
    return any(marker in text for marker in _CONNECT_FAILURES)
