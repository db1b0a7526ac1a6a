"""The job links' decisions without I/O (``pipeline.linkplan``): what ``JobsLive`` asks
before it launches, cancels, reconciles or tells the table what a runner said."""

from __future__ import annotations

import uuid

from ambrosia_services.jobs import Cancel, JobId
from ambrosia_services.jobs.attempts import Reconciled, RunnerCancelCode, member_id
from ambrosia_services.jobs.link import Held
from ambrosia_services.pipeline.jobtable import JobTable
from ambrosia_services.pipeline.linkplan import CancelMeaning, LinkPlan, lost_decision

ME = member_id("coordinator/test")
RUNNERS = {"r0": member_id("runner/r0"), "r1": member_id("runner/r1")}


def _table(jobs: int) -> JobTable:
    table = JobTable()
    table.configure("test", {"runners": list(RUNNERS), "max_attempts": 3})
    for _ in range(jobs):
        table.submit("wordcount", {"n": 1})
    return table


def test_each_start_is_launched_once_oldest_first_and_a_new_life_counts_the_states() -> None:
    table = _table(3)
    plan = LinkPlan(ME, RUNNERS, _table(0))
    first = plan.launches(table)
    assert [go.local_id for go in first] == [0, 1, 2]
    assert [go.member for go in first] == [RUNNERS[table.runner_of(go.key)] for go in first]
    assert first[0].params == {"job": "test-1", "attempt": 1, "args": {"n": 1}}
    assert plan.launches(table) == []  # never the same start twice
    # A new primary: every start its state holds may have reached its runner.
    again = LinkPlan(ME, RUNNERS, table)
    assert again.launches(table) == [] and set(again.records) == {0, 1, 2}
    # A runner no longer configured: its start waits for a reconfiguration.
    only = LinkPlan(ME, {"r0": RUNNERS["r0"]}, _table(0))
    assert {go.runner for go in only.launches(table)} == {"r0"}


def test_a_runners_cancel_is_a_loss_a_failure_or_ours() -> None:
    table = _table(1)
    plan = LinkPlan(ME, RUNNERS, table)
    job, runner = JobId(ME, 0), RUNNERS["r0"]

    def meaning(code: int, by: uuid.UUID = runner) -> tuple[CancelMeaning, bool]:
        verdict = plan.cancelled(table, Cancel(job, by, int(code), "why"))
        return verdict.meaning, verdict.spark_failed

    assert meaning(RunnerCancelCode.JOB_FAILED) == (CancelMeaning.FAILED, False)
    assert meaning(RunnerCancelCode.ATTEMPT_REUSED) == (CancelMeaning.LOST, False)
    assert meaning(RunnerCancelCode.CONNECT_FAILED) == (CancelMeaning.LOST, True)
    assert meaning(99) == (CancelMeaning.FAILED, False)  # a code this side does not know
    assert meaning(RunnerCancelCode.JOB_FAILED, by=ME) == (CancelMeaning.IGNORED, False)
    other = plan.cancelled(table, Cancel(JobId(ME, 7), runner, 1, "gone"))
    assert other.meaning is CancelMeaning.IGNORED and other.key is None


def test_a_lost_start_is_reconciled_once_however_often_it_is_reported() -> None:
    table = _table(2)
    plan = LinkPlan(ME, RUNNERS, table)
    held = Held(RUNNERS["r0"], (JobId(ME, 0),), (JobId(ME, 1), JobId(uuid.uuid4(), 1)))
    answer = plan.held(table, held)
    assert answer.started == [("test-1", 0)]
    assert answer.reconcile == [(1, "test-2")]  # another initiator's job is not ours
    assert len(answer.cancel) == 2  # both ended on the link
    assert plan.held(table, held).reconcile == []


def test_a_lost_start_is_started_again_as_the_same_attempt_unless_spark_said_otherwise(
) -> None:
    assert lost_decision(Reconciled.COMMITTED, False)[0]
    assert lost_decision(Reconciled.FINISHED_STAGING, True)[0]
    assert lost_decision(Reconciled.UNKNOWN, True) == (
        True, "the attempt's staging is partial: its runner asks Spark")
    assert lost_decision(Reconciled.UNKNOWN, False)[1] == "no staging yet: its runner asks Spark"
    assert not lost_decision(Reconciled.RUNNING, False)[0]
