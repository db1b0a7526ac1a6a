"""A job attempt's identities, its directories, the commit rule and reconciliation.

Everything Spark sees of an attempt is derived from two logged values, the job's key and
the attempt number, so a coordinator that replays its log (or a new primary) names the
same tag, Connect session, operation and directories again, and never invents new ones:

- job tag ``ambrosia-job-<job>-<attempt>`` (what ``interruptTag`` cancels);
- Connect session id and operation id: uuid5 of ``session/<job>/<attempt>`` and
  ``operation/<job>/<attempt>`` under ``NAMESPACE``, fixed for ever;
- staging directory ``<out>/_attempts/<job>/<attempt>``, final directory ``<out>/<job>``.

The commit rule: an attempt writes only into its staging directory; Spark's committer
puts ``_SUCCESS`` there when the write is whole; the commit is one ``os.rename`` of the
staging directory onto the final one. A rename onto a non-empty directory fails
(ENOTEMPTY/EEXIST), so of two attempts racing to commit exactly one wins, and a reader
sees either no output or a whole one. Measured: overwrite, append and the version-2 file
committer each lose or duplicate rows under ``kill -9``; staging plus rename does not.

Standard library and attrs only: the coordinator's side uses this module too, and must
never import pyspark.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import re
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ambrosia_core.durable import fsync_dir

from .errors import CommitConflictError, PlanError, StagingIncompleteError
from .messages import JobId

__all__ = [
    "ATTEMPT_FILE",
    "NAMESPACE",
    "SUCCESS",
    "Attempt",
    "CommitOutcome",
    "OperationState",
    "Reconciled",
    "RunnerCancelCode",
    "commit",
    "committed_attempt",
    "is_finished",
    "job_key",
    "member_id",
    "parse_plan",
    "plan_params",
    "reconcile",
]

NAMESPACE: Final = uuid.UUID("3f0b6c1e-9a57-5d42-8e1b-7c2d4a9f6e30")
"""The project's namespace for every uuid5 it derives; changing it renames every job."""

SUCCESS: Final = "_SUCCESS"
"""Spark's marker of a whole write; its presence tells finished staging from partial."""

ATTEMPT_FILE: Final = "_ATTEMPT"
"""Written into staging just before the rename: which attempt's output was committed."""

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def member_id(name: str) -> uuid.UUID:
    """A runner's (or coordinator's) member id from its name, the same on every machine."""
    if not name:
        raise ValueError("a member name must not be empty")
    return uuid.uuid5(NAMESPACE, f"member/{name}")


def job_key(job_id: JobId) -> str:
    """A job key from the protocol id of its first attempt (each attempt is a new ``start``
    with a new protocol id, so the key that names the output must outlive them)."""
    return str(job_id.uuid)


def _check_key(_inst: object, _attr: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not _KEY.fullmatch(value):
        raise PlanError(
            f"job key {value!r} is not 1-128 letters, digits, '.', '_' or '-' starting "
            "with a letter or digit (it names a directory)"
        )


def _check_number(_inst: object, _attr: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or not 1 <= value < 2**63:
        raise PlanError(f"attempt {value!r} is not an int of at least 1")


@attrs.frozen
class Attempt:
    """Attempt ``number`` (1, 2, ...) of job ``job``: every name Spark sees of it."""

    job: str = attrs.field(validator=_check_key)
    number: int = attrs.field(validator=_check_number)

    @property
    def tag(self) -> str:
        return f"ambrosia-job-{self.job}-{self.number}"

    @property
    def session_id(self) -> uuid.UUID:
        return uuid.uuid5(NAMESPACE, f"session/{self.job}/{self.number}")

    @property
    def operation_id(self) -> uuid.UUID:
        return uuid.uuid5(NAMESPACE, f"operation/{self.job}/{self.number}")

    def staging(self, out: str | os.PathLike[str]) -> Path:
        return Path(out) / "_attempts" / self.job / str(self.number)

    def final(self, out: str | os.PathLike[str]) -> Path:
        return Path(out) / self.job

    def __str__(self) -> str:
        return f"{self.job}#{self.number}"


def plan_params(attempt: Attempt, args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``start`` parameters for an attempt: its job key, its number, the job's args."""
    return {"job": attempt.job, "attempt": attempt.number, "args": dict(args or {})}


def parse_plan(params: Mapping[str, Any]) -> tuple[Attempt, dict[str, Any]]:
    """The attempt and the job's arguments from a ``start``'s parameters.

    Raises:
        PlanError: a key missing or of the wrong type, or unexpected keys.
    """
    extra = set(params) - {"job", "attempt", "args"}
    if extra:
        raise PlanError(f"job plan has unexpected keys {sorted(extra)}")
    if "job" not in params or "attempt" not in params:
        raise PlanError("job plan needs 'job' (the job key) and 'attempt'")
    args = params.get("args", {})
    if not isinstance(args, dict):
        raise PlanError(f"job plan 'args' must be a map, got {type(args).__name__}")
    return Attempt(params["job"], params["attempt"]), args


def is_finished(directory: Path) -> bool:
    """Whether ``directory`` holds a whole write (Spark's ``_SUCCESS`` marker)."""
    return (directory / SUCCESS).is_file()


def committed_attempt(out: str | os.PathLike[str], job: str) -> int | None:
    """The attempt whose output was committed as ``<out>/<job>``, or None if none was."""
    final = Path(out) / job
    if not is_finished(final):
        return None
    try:
        return int((final / ATTEMPT_FILE).read_text())
    except (OSError, ValueError):
        return None


class CommitOutcome(enum.Enum):
    COMMITTED = "this attempt's output is now the job's output"
    ALREADY_COMMITTED = "another attempt's output was committed first"


def _sync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (deepest directories first, each
    after its entries)."""
    for dirpath, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def commit(attempt: Attempt, out: str | os.PathLike[str]) -> CommitOutcome:
    """Commit a finished attempt by one rename of its staging directory onto the final one.

    Raises:
        StagingIncompleteError: the staging directory has no ``_SUCCESS`` (and no attempt
            was committed).
        CommitConflictError: the final directory exists without ``_SUCCESS``.
    """
    staging, final = attempt.staging(out), attempt.final(out)
    if not is_finished(staging):
        if is_finished(final):
            return CommitOutcome.ALREADY_COMMITTED
        raise StagingIncompleteError(f"attempt {attempt} has no finished output in {staging}")
    (staging / ATTEMPT_FILE).write_text(str(attempt.number))
    # Spark's writers close their files without syncing them: a power cut after the
    # rename would leave a committed directory of empty or missing files. Every file
    # and directory of the output is synced first, then the rename in both directories.
    _sync_tree(staging)
    try:
        os.rename(staging, final)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        if is_finished(final):
            return CommitOutcome.ALREADY_COMMITTED
        raise CommitConflictError(
            f"{final} exists but holds no finished output; not committing attempt {attempt}"
        ) from None
    fsync_dir(final.parent)
    fsync_dir(staging.parent)
    with contextlib.suppress(PermissionError):  # ``out``'s own entry, made by Spark
        fsync_dir(final.parent.parent)
    return CommitOutcome.COMMITTED


class OperationState(enum.Enum):
    """What Spark Connect's ``GetStatus`` says of an operation (UNKNOWN: nothing)."""

    RUNNING = "running"
    TERMINATING = "terminating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


class Reconciled(enum.Enum):
    """What to do about a job attempt after a crash or failover, in the order checked."""

    COMMITTED = "the job's output is committed: the job is done"
    FINISHED_STAGING = "the attempt's output is whole but not committed: commit it"
    RUNNING = "the attempt still runs: re-attach and wait"
    UNKNOWN = "nothing of the attempt survives: start a new attempt"


def reconcile(
    attempt: Attempt,
    out: str | os.PathLike[str],
    *,
    held: bool = False,
    status: Callable[[Attempt], OperationState] | None = None,
) -> Reconciled:
    """Decide what a coordinator does about an attempt it had launched, in the issue's
    order: committed output, finished staging, still running, otherwise unknown.

    Args:
        attempt: the attempt the coordinator's log says it launched last.
        out: the output root the runner writes under.
        held: a runner's ``check_response`` listed the attempt's job as active.
        status: asks Spark Connect for the attempt's operation (``GetStatus``); None
            when unavailable (a server restart forgets every operation anyway).
    """
    if is_finished(attempt.final(out)):
        return Reconciled.COMMITTED
    if is_finished(attempt.staging(out)):
        return Reconciled.FINISHED_STAGING
    if held:
        return Reconciled.RUNNING
    if status is not None and status(attempt) in (
        OperationState.RUNNING,
        OperationState.TERMINATING,
    ):
        return Reconciled.RUNNING
    return Reconciled.UNKNOWN


class RunnerCancelCode(enum.IntEnum):
    """The ``error_code`` of a cancel a runner asks for (the initiator picks its own)."""

    JOB_FAILED = 1  # the job function or Spark raised; the message says what
    BAD_PLAN = 2  # the start named no known job or carried no job plan
    ATTEMPT_REUSED = 3  # the attempt had been launched before: start a new one
    CONNECT_FAILED = 4  # Spark Connect failed under it (crashed, unreachable, lost the
    # operation): start a new one; no fault of the job's, so not one of its attempts

    @property
    def is_loss(self) -> bool:
        """Whether the initiator takes the refusal as a loss (a new attempt that does not
        count against the job's attempts) rather than as the attempt's failure."""
        return self in (RunnerCancelCode.ATTEMPT_REUSED, RunnerCancelCode.CONNECT_FAILED)
