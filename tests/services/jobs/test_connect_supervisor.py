"""The Connect server's supervisor without a JVM: a server that dies is started again under
its declared retry; a restart that fails is said once a streak with its count, and one that
serves its port resets the back-off."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ambrosia_services.jobs.errors import SparkServerError
from ambrosia_services.jobs.spark import server as server_module
from ambrosia_services.jobs.spark.server import ConnectServer

from tests.launcher import wait_until


class FakeProcess:
    """A child that runs until ``die``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()

    def die(self, code: int = 137) -> None:
        self.returncode = code
        self._ended.set()

    def wait(self, timeout: float | None = None) -> int:
        self._ended.wait(timeout)
        return self.returncode or 0


class Scripted(ConnectServer):
    """Each launch takes the next outcome: a process, or the error it fails with."""

    def __init__(self, log_dir: Path, outcomes: Iterator[Any], cap: float = 0.02) -> None:
        # A cap below the floor is the floor too: waits of 10 to 20 ms, not seconds.
        super().__init__(1, log_dir=log_dir, max_backoff=cap, jars=[])
        self.outcomes = outcomes
        self.launched: list[FakeProcess] = []

    def _launch(self, stop: threading.Event | None = None) -> subprocess.Popen[bytes]:
        if self._log is None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed by stop)
        outcome = next(self.outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        self.launched.append(outcome)
        return outcome  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _no_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "stop_group",
                        lambda process, _grace: process.die(-15))


def test_a_dead_server_is_restarted_a_failed_restart_said_once_and_the_back_off_reset(
        tmp_path: Path) -> None:
    busy = SparkServerError("port 1 is already in use on 127.0.0.1")
    server = Scripted(tmp_path, iter([FakeProcess(1), busy, busy, busy, FakeProcess(2),
                                      FakeProcess(3)]))
    server.start()
    try:
        server.launched[0].die()
        wait_until(lambda: server.restarts == 1, "the restart after three refusals")
        # Three failed restarts in a row: the first said, the 2nd and 3rd counted; the
        # restart that served its port reset the back-off.
        assert server.attempts.failures == 0
        server.launched[1].die()
        wait_until(lambda: server.restarts == 2, "the second restart")
        assert server.attempts.failures == 0
    finally:
        server.stop(grace=5)
    said = [line for line in server.log_path.read_text().splitlines() if line]
    assert said == ["[supervisor] restart failed (1 in a row): port 1 is already in use on "
                    "127.0.0.1"]
    assert not server._supervisor or not server._supervisor.is_alive()


def test_a_stop_during_the_back_off_ends_the_supervisor(tmp_path: Path) -> None:
    server = Scripted(tmp_path, iter([FakeProcess(1)]), cap=60.0)
    server.start()
    server.launched[0].die()
    wait_until(lambda: server.attempts.failures == 1, "the server's death counted")
    server.stop(grace=5)  # ends the wait at once: no launch is asked of the script
    assert server._supervisor is not None and not server._supervisor.is_alive()
    assert server.restarts == 0
