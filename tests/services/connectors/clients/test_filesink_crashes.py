"""kill -9 of the file sink at chosen durable steps and at random moments, while a
scripted coordinator drives transactions of numbered lines: after every restart the
committed file holds exactly the transactions decided for commit, in order, once."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from ambrosia_services.connectors import ConnectorProtocolError

from .helpers import SinkProcess, connect_when_up

_LOST = (OSError, ConnectorProtocolError)


class Coordinator:
    """The coordinator's side of the sink link, as the real one must behave: it decides
    commit once the sink votes yes, settles listed transactions after a reconnect
    (commit if decided, else abort) and resumes from the offset the sink reports."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.committed_lines = 0  # lines in transactions decided for commit
        self.decided: set[str] = set()
        self.txns = 0

    @staticmethod
    def line(i: int) -> bytes:
        return f"line {i:05d}\n".encode()

    def expected(self) -> bytes:
        return b"".join(self.line(i) for i in range(self.committed_lines))

    def session(self, port: int, committed: Callable[[], bytes], lines: int) -> None:
        """One connection: settle, check the committed file, then commit ``lines`` lines."""
        c = connect_when_up(port)
        try:
            c.handshake()
            for txn in c.list_uncommitted():
                c.phase2(txn, txn in self.decided)
            offset = c.notify(len(self.expected()))
            assert offset == len(self.expected())
            assert committed() == self.expected()
            goal = self.committed_lines + lines
            while self.committed_lines < goal:
                k = self.rng.randint(1, 5)
                start = offset
                for i in range(self.committed_lines, self.committed_lines + k):
                    c.data(offset, self.line(i))
                    offset += len(self.line(i))
                txn = f"t{self.txns}"
                self.txns += 1
                assert c.phase1(txn, start, offset), "a healthy sink votes yes"
                self.decided.add(txn)
                self.committed_lines += k
                c.phase2(txn, True)
            c.sync()
        finally:
            c.close()


def _prefix_of_expected(data: bytes, coord: Coordinator) -> bool:
    return coord.expected().startswith(data)


def test_kill9_at_each_durable_step_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    coord = Coordinator(random.Random(7))
    out, log = tmp_path / "out", tmp_path / "sink.log"
    steps = [
        ("pending-synced", 2),
        ("prepare-logged", 2),  # leaves a prepared transaction the coordinator never decided
        ("abort-logged", 1),  # ... whose abort is cut short
        ("commit-logged", 3),  # the committed file lacks the range: recovery copies it
        ("commit-applied", 2),
    ]
    for step, after in steps:
        sink = SinkProcess(out, log, crash_at=step, crash_after=after)
        with pytest.raises(_LOST):
            coord.session(sink.port, sink.committed, 1000)
        assert sink.proc.wait() == -9, step
        assert _prefix_of_expected(sink.committed(), coord), step
    sink = SinkProcess(out, log)
    try:
        coord.session(sink.port, sink.committed, 20)
        assert sink.committed() == coord.expected()
    finally:
        sink.kill()


# `make chaos`: kill -9 at each durable step stays in make test above, and the simulation
# crashes the real file sink before any disk call or after any durable step (pipe_world).
@pytest.mark.chaos
@pytest.mark.slow
def test_kill9_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rng = random.Random(11)
    coord = Coordinator(rng)
    out, log = tmp_path / "out", tmp_path / "sink.log"
    for _ in range(8):
        sink = SinkProcess(out, log)
        killer = threading.Timer(rng.uniform(0.05, 0.4), sink.kill)
        killer.start()
        with contextlib.suppress(*_LOST):
            coord.session(sink.port, sink.committed, 100_000)
        killer.join()
        sink.kill()
        assert _prefix_of_expected(sink.committed(), coord)
    sink = SinkProcess(out, log)
    try:
        coord.session(sink.port, sink.committed, 20)
        assert sink.committed() == coord.expected()
        assert coord.committed_lines > 40  # the crashes came while work was going on
    finally:
        sink.kill()
