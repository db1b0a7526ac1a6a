"""Attempt identities, the rename commit rule and reconciliation, on the file system only.

(The same rule under real Spark, with real runners, is in tests/services/jobs/spark/.)
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ambrosia_services.jobs import JobId
from ambrosia_services.jobs.attempts import (
    ATTEMPT_FILE,
    NAMESPACE,
    SUCCESS,
    Attempt,
    CommitOutcome,
    OperationState,
    Reconciled,
    commit,
    committed_attempt,
    job_key,
    member_id,
    parse_plan,
    plan_params,
    reconcile,
)
from ambrosia_services.jobs.errors import CommitConflictError, PlanError, StagingIncompleteError

ROOT = Path(__file__).resolve().parents[3]


def test_identities_are_derived_from_job_and_attempt_only() -> None:
    attempt = Attempt("wc", 2)
    assert attempt.tag == "ambrosia-job-wc-2"
    assert attempt.session_id == uuid.uuid5(NAMESPACE, "session/wc/2")
    assert attempt.operation_id == uuid.uuid5(NAMESPACE, "operation/wc/2")
    # Pinned: a change of namespace or of the names would rename every job a coordinator
    # has logged, and reconciliation would not find them.
    assert str(attempt.session_id) == "bbcd90ab-bb00-5f07-b0e7-1b1ca6a11757"
    assert str(attempt.operation_id) == "82de654d-4948-5c19-b74a-f80f459f7d84"
    assert str(member_id("r1")) == "ff0be161-edb5-57a7-9bf7-a903e26b400f"
    assert Attempt("wc", 2) == attempt and Attempt("wc", 3).session_id != attempt.session_id
    assert attempt.staging("/o") == Path("/o/_attempts/wc/2")
    assert attempt.final("/o") == Path("/o/wc")
    assert member_id("r1") == uuid.uuid5(NAMESPACE, "member/r1")
    job = JobId(uuid.UUID(int=1), 5)
    assert job_key(job) == str(job.uuid)


@pytest.mark.parametrize("key", ["", "_attempts", ".hidden", "a/b", "a b", "x" * 129])
def test_a_job_key_that_cannot_name_a_directory_is_refused(key: str) -> None:
    with pytest.raises(PlanError, match="job key"):
        Attempt(key, 1)


def test_plans_round_trip_and_bad_plans_are_named() -> None:
    attempt = Attempt("wc", 1)
    assert parse_plan(plan_params(attempt, {"input": "x"})) == (attempt, {"input": "x"})
    with pytest.raises(PlanError, match="needs 'job'"):
        parse_plan({"attempt": 1})
    with pytest.raises(PlanError, match="unexpected keys"):
        parse_plan({"job": "wc", "attempt": 1, "extra": 1})
    with pytest.raises(PlanError, match="attempt 0"):
        parse_plan({"job": "wc", "attempt": 0})
    with pytest.raises(PlanError, match="'args' must be a map"):
        parse_plan({"job": "wc", "attempt": 1, "args": [1]})


def _stage(attempt: Attempt, out: Path, rows: bytes, *, finished: bool = True) -> None:
    staging = attempt.staging(out)
    staging.mkdir(parents=True)
    (staging / "part-00000.json").write_bytes(rows)
    if finished:
        (staging / SUCCESS).write_bytes(b"")


def test_commit_is_one_rename_and_a_second_attempt_finds_it_committed(tmp_path: Path) -> None:
    first, second = Attempt("wc", 1), Attempt("wc", 2)
    _stage(first, tmp_path, b"one\n")
    _stage(second, tmp_path, b"two\n")
    assert reconcile(first, tmp_path) is Reconciled.FINISHED_STAGING
    assert commit(first, tmp_path) is CommitOutcome.COMMITTED
    assert not first.staging(tmp_path).exists()
    assert (first.final(tmp_path) / "part-00000.json").read_bytes() == b"one\n"
    assert commit(second, tmp_path) is CommitOutcome.ALREADY_COMMITTED
    assert (first.final(tmp_path) / "part-00000.json").read_bytes() == b"one\n"
    assert committed_attempt(tmp_path, "wc") == 1
    assert commit(first, tmp_path) is CommitOutcome.ALREADY_COMMITTED  # a rerun after commit


def test_unfinished_staging_is_never_committed(tmp_path: Path) -> None:
    attempt = Attempt("wc", 1)
    _stage(attempt, tmp_path, b"half", finished=False)
    with pytest.raises(StagingIncompleteError, match="no finished output"):
        commit(attempt, tmp_path)
    assert not attempt.final(tmp_path).exists()


def test_a_final_directory_without_success_is_a_conflict(tmp_path: Path) -> None:
    attempt = Attempt("wc", 1)
    _stage(attempt, tmp_path, b"rows\n")
    attempt.final(tmp_path).mkdir()
    (attempt.final(tmp_path) / "stray").write_bytes(b"x")
    with pytest.raises(CommitConflictError, match="holds no finished output"):
        commit(attempt, tmp_path)


def _race(out: str, number: int, go: multiprocessing.synchronize.Event) -> None:
    go.wait()
    outcome = commit(Attempt("race", number), out)
    sys.exit(0 if outcome is CommitOutcome.COMMITTED else 3)


def test_attempts_racing_to_commit_in_processes_leave_exactly_one_whole_output(
        tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for round_ in range(20):
        out = tmp_path / str(round_)
        for number in (1, 2, 3):
            _stage(Attempt("race", number), out, f"attempt {number}\n".encode() * 100)
        go = ctx.Event()
        racers = [ctx.Process(target=_race, args=(str(out), n, go)) for n in (1, 2, 3)]
        for racer in racers:
            racer.start()
        go.set()
        for racer in racers:
            racer.join()
        codes = sorted(r.exitcode or 0 for r in racers)
        assert codes == [0, 3, 3], codes
        winner = committed_attempt(out, "race")
        assert winner in (1, 2, 3)
        final = Attempt("race", 1).final(out)
        assert (final / "part-00000.json").read_bytes() == f"attempt {winner}\n".encode() * 100
        assert (final / ATTEMPT_FILE).read_text() == str(winner)


def test_reconcile_checks_in_the_issues_order(tmp_path: Path) -> None:
    attempt = Attempt("wc", 1)

    def running(_a: Attempt) -> OperationState:
        return OperationState.RUNNING

    def succeeded(_a: Attempt) -> OperationState:
        return OperationState.SUCCEEDED

    assert reconcile(attempt, tmp_path) is Reconciled.UNKNOWN
    assert reconcile(attempt, tmp_path, status=succeeded) is Reconciled.UNKNOWN
    assert reconcile(attempt, tmp_path, status=running) is Reconciled.RUNNING
    assert reconcile(attempt, tmp_path, held=True) is Reconciled.RUNNING
    _stage(attempt, tmp_path, b"x\n", finished=False)
    assert reconcile(attempt, tmp_path) is Reconciled.UNKNOWN  # partial staging is nothing
    (attempt.staging(tmp_path) / SUCCESS).write_bytes(b"")
    assert reconcile(attempt, tmp_path, held=True) is Reconciled.FINISHED_STAGING
    commit(attempt, tmp_path)
    assert reconcile(attempt, tmp_path, held=True, status=running) is Reconciled.COMMITTED


def test_importing_the_protocol_and_the_link_loads_no_spark_pandas_or_arrow() -> None:
    code = (
        "import sys, ambrosia_services.jobs, ambrosia_services.jobs.link, "
        "ambrosia_services.jobs.attempts, ambrosia_services.jobs.transport, "
        "ambrosia_services.jobs.spark, ambrosia_services.jobs.spark.server\n"
        "loaded = sorted(m for m in ('pyspark', 'pandas', 'pyarrow', 'grpc') "
        "if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'ic-harness'}"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, check=True)
    assert done.stdout.strip() == ""
