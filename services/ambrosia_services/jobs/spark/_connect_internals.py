"""The one module that touches PySpark's Spark Connect client internals.

Three things the public API of pyspark 4.3 does not offer, and the job runner needs:

- running an action under an operation id we choose (derived from the job attempt), so a
  coordinator can ask for that operation after a crash instead of launching it twice;
- ``GetStatus`` for an operation, through the client's private
  ``_get_operation_statuses``;
- refusing the client's own relaunch of an operation on a restarted server;
- joining an existing server-side session (``sc://...;session_id=<uuid>``) without
  releasing it when done, so ``interruptTag`` reaches the job from another session object.

They rely on private names (``SparkConnectClient._execute_plan_request_with_metadata``,
``._get_operation_statuses``, ``._stub``, ``SparkSession.release_session_on_close``); the
version range is pinned in pyproject (``pyspark>=4.3,<4.4``) and ``tests/services/jobs/
spark/test_connect_internals.py`` fails loudly when an upgrade breaks any of them.
``available()`` reports what is missing: without it the runner still works (the operation
id is Spark's own, and reconciliation falls back to output markers and ``interruptTag``).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession as _PublicSession
from pyspark.sql.connect.client.core import SparkConnectClient
from pyspark.sql.connect.session import SparkSession

from ..attempts import OperationState
from ..errors import JobRunError

__all__ = [
    "RelaunchRefusedError",
    "available",
    "join_session",
    "missing",
    "new_session",
    "operation_state",
    "with_operation_id",
]



class RelaunchRefusedError(JobRunError):
    """The client tried to send an operation id a second time (its server restarted)."""


_PRIVATE_CLIENT = ("_execute_plan_request_with_metadata", "_get_operation_statuses")

# GetStatusResponse.OperationStatus.OperationState names -> ours.
_STATES = {
    "OPERATION_STATE_RUNNING": OperationState.RUNNING,
    "OPERATION_STATE_TERMINATING": OperationState.TERMINATING,
    "OPERATION_STATE_SUCCEEDED": OperationState.SUCCEEDED,
    "OPERATION_STATE_FAILED": OperationState.FAILED,
    "OPERATION_STATE_CANCELLED": OperationState.CANCELLED,
}


def missing() -> list[str]:
    """The private names this module needs that the installed pyspark lacks."""
    client = SparkConnectClient
    gone = [f"SparkConnectClient.{n}" for n in _PRIVATE_CLIENT if not hasattr(client, n)]
    try:
        from pyspark.sql.connect.proto import base_pb2

        base_pb2.GetStatusResponse.OperationStatus.OperationState.Value(
            "OPERATION_STATE_CANCELLED"
        )
    except (ImportError, AttributeError, ValueError):
        gone.append("base_pb2.GetStatusResponse.OperationStatus.OperationState")
    return gone


def available() -> bool:
    return not missing()


def _url(connect: str, session_id: uuid.UUID) -> str:
    base = connect.rstrip("/")
    return f"{base}/;session_id={session_id}"


def _create(connect: str, session_id: uuid.UUID) -> SparkSession:
    # The public builder, not the Connect one: it also switches pyspark.sql.functions
    # to their Connect forms (the SPARK_CONNECT_MODE_ENABLED switch).
    session = _PublicSession.builder.remote(_url(connect, session_id)).create()
    assert isinstance(session, SparkSession)
    return session


def new_session(connect: str, session_id: uuid.UUID) -> SparkSession:
    """A Spark Connect session whose id is ours (one per job attempt: an idle session is
    closed after ``defaultSessionTimeout`` and its id refused for ever)."""
    return _create(connect, session_id)


@contextlib.contextmanager
def join_session(connect: str, session_id: uuid.UUID) -> Iterator[SparkSession]:
    """Another handle on an existing session; closing it leaves the session alive."""
    session = _create(connect, session_id)
    session.release_session_on_close = False
    try:
        yield session
    finally:
        session.stop()


@contextlib.contextmanager
def with_operation_id(session: SparkSession, operation_id: uuid.UUID) -> Iterator[None]:
    """Run the next action in this thread under ``operation_id`` (later ones get Spark's),
    and never send that operation to the server twice.

    Only the calling thread's first ``ExecutePlan`` request takes the id, so a job that
    runs other actions on other threads is not confused; the client is restored after.

    Measured: when the server restarts mid-operation, the client's reattach meets
    OPERATION_NOT_FOUND and, if no response had arrived yet, sends the same
    ``ExecutePlan`` again: the restarted server runs the write a second time. A second
    send of our operation id is refused here with ``RelaunchRefusedError``, so the attempt
    fails and reconciliation decides (a new attempt).
    """
    ours = str(operation_id)
    client: Any = session.client
    original = client._execute_plan_request_with_metadata
    stub = client._stub
    execute_plan = stub.ExecutePlan
    owner = threading.get_ident()
    used = False
    sent = 0

    def request(operation_id: str | None = None) -> Any:
        nonlocal used
        if not used and operation_id is None and threading.get_ident() == owner:
            used = True
            return original(operation_id=ours)
        return original(operation_id=operation_id)

    def send_once(req: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal sent
        if req.operation_id == ours:
            sent += 1
            if sent > 1:
                raise RelaunchRefusedError(
                    f"operation {ours} was sent once already; not relaunching it "
                    "(the server lost it: start a new attempt)"
                )
        return execute_plan(req, *args, **kwargs)

    client._execute_plan_request_with_metadata = request
    stub.ExecutePlan = send_once
    try:
        yield
    finally:
        del client._execute_plan_request_with_metadata  # the class's method shows again
        stub.ExecutePlan = execute_plan


def operation_state(session: SparkSession, operation_id: uuid.UUID) -> OperationState:
    """``GetStatus`` of one operation of the session (UNKNOWN if the server has none)."""
    from pyspark.sql.connect.proto import base_pb2

    client: Any = session.client
    response = client._get_operation_statuses([str(operation_id)])
    names = base_pb2.GetStatusResponse.OperationStatus.OperationState
    for status in response.operation_statuses:
        if status.operation_id == str(operation_id):
            return _STATES.get(names.Name(status.state), OperationState.UNKNOWN)
    return OperationState.UNKNOWN
