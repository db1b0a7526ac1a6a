"""pyspark's client internals we rely on still work: this fails loudly on an upgrade that
breaks any of them (setting the operation id, GetStatus, interruptTag from a joined
session that is left open)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pyspark
import pytest
from ambrosia_services.jobs.attempts import Attempt, OperationState
from ambrosia_services.jobs.spark import ConnectServer
from ambrosia_services.jobs.spark import _connect_internals as internals
from ambrosia_services.jobs.spark.execute import cancel_attempt, operation_state

from tests.launcher import wait_until
from tests.services.jobs.spark.jobs_for_tests import sleepy

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(240)]


def test_the_pinned_pyspark_has_every_internal_we_use() -> None:
    assert pyspark.__version__.startswith("4.3."), pyspark.__version__
    assert internals.missing() == []
    assert internals.available()


def test_an_action_runs_under_our_operation_id_and_getstatus_finds_it(
        connect_server: ConnectServer, tmp_path: Path) -> None:
    attempt = Attempt(f"internals-{uuid.uuid4().hex[:8]}", 1)
    session = internals.new_session(connect_server.url, attempt.session_id)
    try:
        assert session.session_id == str(attempt.session_id)
        with internals.with_operation_id(session, attempt.operation_id):
            session.range(10).write.mode("error").json(str(tmp_path / "o"))
        assert session.range(3).count() == 3  # later actions get Spark's own ids
        assert internals.operation_state(session, attempt.operation_id) is (
            OperationState.SUCCEEDED)
        assert internals.operation_state(session, uuid.uuid4()) is OperationState.UNKNOWN
        # From another session object joined to the same id (what a new runner does).
        assert operation_state(connect_server.url, attempt) is OperationState.SUCCEEDED
    finally:
        session.stop()
    # A stopped session's id is refused for ever: its operations read as unknown.
    assert operation_state(connect_server.url, attempt) is OperationState.UNKNOWN


def test_interrupt_tag_from_a_joined_session_cancels_and_leaves_the_session_open(
        connect_server: ConnectServer) -> None:
    attempt = Attempt(f"internals-{uuid.uuid4().hex[:8]}", 1)
    session = internals.new_session(connect_server.url, attempt.session_id)
    failure: list[Exception] = []

    def run() -> None:
        session.addTag(attempt.tag)
        try:
            with internals.with_operation_id(session, attempt.operation_id):
                sleepy(session, {"rows": 40, "sleep_ms": 1000}).collect()
        except Exception as err:  # the interrupted action raises
            failure.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: operation_state(connect_server.url, attempt)
                   is OperationState.RUNNING, "the operation to run", 60)
        assert cancel_attempt(connect_server.url, attempt) == [str(attempt.operation_id)]
        thread.join(60)
        assert not thread.is_alive() and failure
        wait_until(lambda: operation_state(connect_server.url, attempt)
                   is OperationState.CANCELLED, "the operation to be cancelled", 30)
        assert session.range(5).count() == 5  # the joined handle did not release it
    finally:
        session.stop()


def test_our_operation_is_never_sent_twice(connect_server: ConnectServer,
                                           tmp_path: Path) -> None:
    attempt = Attempt(f"internals-{uuid.uuid4().hex[:8]}", 1)
    session = internals.new_session(connect_server.url, attempt.session_id)
    try:
        client = session.client
        with internals.with_operation_id(session, attempt.operation_id):
            session.range(4).write.mode("error").json(str(tmp_path / "o"))
            # What the client's reattach does after a server restart: the same request again.
            again = client._execute_plan_request_with_metadata(
                operation_id=str(attempt.operation_id))
            with pytest.raises(internals.RelaunchRefusedError, match="not relaunching"):
                client._stub.ExecutePlan(again)
        assert session.range(2).count() == 2  # the stub is restored
    finally:
        session.stop()


def test_connect_failing_under_an_attempt_is_a_loss_and_a_jobs_error_is_a_failure() -> None:
    """A Connect crash used to count as one of the job's attempts for every job in
    flight: three crashes during one batch failed a batch nobody's code rejected."""
    from ambrosia_services.jobs.attempts import RunnerCancelCode
    from ambrosia_services.jobs.spark.execute import connect_failed
    from ambrosia_services.pipeline.linkplan import is_loss as _is_loss
    from pyspark.errors import AnalysisException
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    assert connect_failed(internals.RelaunchRefusedError("sent once already"))
    assert connect_failed(SparkConnectGrpcException(
        "<_MultiThreadedRendezvous of RPC that terminated with: status = "
        "StatusCode.UNAVAILABLE details = \"failed to connect to all addresses\">"))
    assert connect_failed(SparkConnectGrpcException(
        "[INVALID_CURSOR.RESPONSE_ALREADY_RECEIVED] The cursor is invalid."))
    assert not connect_failed(AnalysisException(
        "[PATH_NOT_FOUND] Path does not exist: file:/nonexistent/words.txt."))
    assert not connect_failed(ZeroDivisionError("division by zero"))
    assert [_is_loss(c) for c in RunnerCancelCode] == [False, False, True, True]
    assert not _is_loss(99)  # a code this side does not know: a failure, said as sent
