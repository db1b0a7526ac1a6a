"""The common workload of the "what a Python user would pick instead" benchmarks.

A server holds a counter.  A client sends numbered requests, one at a time: request ``i``
means "add ``i``" and carries ``i`` as its request id.  The server applies every request id
exactly once: a retried id is answered with the reply recorded the first time and changes
nothing.  A reply is the server's state right after the request: ``(count, total)``.

Because the client is sequential and request ``i`` adds ``i``, every reply is predictable:
after requests ``1..i`` the state is ``(i, i * (i + 1) // 2)``.  Every run checks every reply,
re-sends a few ids to check that retries are not applied twice, and reads the final state
back; a run that fails any check raises :class:`WorkloadError` instead of reporting a figure.

Wire format (raw TCP and gRPC alike): a request is 16 bytes, big-endian ``(request_id,
amount)``; a reply is 16 bytes, ``(count, total)``.  Request id 0 is reserved for "read the
state without changing it".

This module is plain standard library so that server processes can import it cheaply.
"""

from __future__ import annotations

import statistics
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_PAIR = struct.Struct(">QQ")
MESSAGE_SIZE = _PAIR.size  # 16 bytes each way
STATE_QUERY_ID = 0


class WorkloadError(AssertionError):
    """A contender broke the exactly-once contract (wrong reply, lost or doubled request)."""


def encode(a: int, b: int) -> bytes:
    return _PAIR.pack(a, b)


def decode(data: bytes) -> tuple[int, int]:
    a, b = _PAIR.unpack(data)
    return a, b


def expected_state(last_id: int) -> tuple[int, int]:
    """State after requests ``1..last_id`` each applied once."""
    return last_id, last_id * (last_id + 1) // 2


class DedupCounter:
    """The in-memory (non-durable) server side used by the raw TCP and gRPC contenders.

    The reply table is the idempotency record: a request id seen before gets its first reply
    back.  Thread safe, since gRPC serves calls from a thread pool.
    """

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self._replies: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def handle(self, request: bytes) -> bytes:
        request_id, amount = decode(request)
        with self._lock:
            if request_id == STATE_QUERY_ID:
                return encode(self.count, self.total)
            reply = self._replies.get(request_id)
            if reply is None:
                self.count += 1
                self.total += amount
                reply = encode(self.count, self.total)
                self._replies[request_id] = reply
            return reply


@dataclass
class RunResult:
    """One checked run of the workload against one contender."""

    contender: str
    requests: int  # timed requests (warm-up requests excluded)
    elapsed_s: float
    latencies_ns: list[int] = field(repr=False)
    final_state: tuple[int, int]
    retries_checked: int

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.elapsed_s

    def latency_us(self, q: float) -> float:
        return percentile(self.latencies_ns, q) / 1000.0

    def to_json(self) -> dict[str, Any]:
        return {
            "contender": self.contender,
            "requests": self.requests,
            "elapsed_s": self.elapsed_s,
            "latencies_ns": self.latencies_ns,
            "final_state": list(self.final_state),
            "retries_checked": self.retries_checked,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        count, total = data["final_state"]
        return cls(
            contender=data["contender"],
            requests=data["requests"],
            elapsed_s=data["elapsed_s"],
            latencies_ns=list(data["latencies_ns"]),
            final_state=(count, total),
            retries_checked=data["retries_checked"],
        )


def percentile(values: list[int] | list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 100]."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100.0 * len(ordered) + 0.5)))
    return float(ordered[rank - 1])


def retry_ids(last_id: int) -> list[int]:
    """The ids re-sent after the timed part: first, middle and last."""
    return sorted({1, max(1, last_id // 2), last_id})


def run_workload(
    contender: str,
    call: Callable[[int, int], tuple[int, int]],
    read_state: Callable[[], tuple[int, int]],
    requests: int,
    warmup: int = 0,
) -> RunResult:
    """Drive one contender through the workload and check it.

    ``call(request_id, amount)`` sends one request and returns the reply ``(count, total)``;
    ``read_state()`` reads the server's state without changing it.  Request ids ``1..warmup``
    warm the path up untimed, ids ``warmup+1..warmup+requests`` are timed one by one.
    """
    if requests < 1:
        raise ValueError("requests must be >= 1")
    replies: dict[int, tuple[int, int]] = {}

    def checked(request_id: int) -> tuple[int, int]:
        reply = call(request_id, request_id)
        want = expected_state(request_id)
        if tuple(reply) != want:
            raise WorkloadError(
                f"{contender}: request {request_id} replied {tuple(reply)}, expected {want}"
            )
        return want

    for request_id in range(1, warmup + 1):
        replies[request_id] = checked(request_id)

    last_id = warmup + requests
    latencies: list[int] = []
    clock = time.perf_counter_ns
    started = clock()
    for request_id in range(warmup + 1, last_id + 1):
        t0 = clock()
        replies[request_id] = checked(request_id)
        latencies.append(clock() - t0)
    elapsed_s = (clock() - started) / 1e9

    # Retries: the same id again must get the first reply back and change nothing.
    retried = retry_ids(last_id)
    for request_id in retried:
        again = tuple(call(request_id, request_id))
        if again != replies[request_id]:
            raise WorkloadError(
                f"{contender}: retried request {request_id} replied {again}, "
                f"first reply was {replies[request_id]}"
            )

    final = tuple(read_state())
    want = expected_state(last_id)
    if final != want:
        raise WorkloadError(f"{contender}: final state {final}, expected {want}")
    return RunResult(
        contender=contender,
        requests=requests,
        elapsed_s=elapsed_s,
        latencies_ns=latencies,
        final_state=want,
        retries_checked=len(retried),
    )


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def spread(values: list[float]) -> float:
    """(max - min) / median over repetitions; 0 for a single run."""
    if len(values) < 2:
        return 0.0
    mid = median(values)
    return (max(values) - min(values)) / mid if mid else 0.0
