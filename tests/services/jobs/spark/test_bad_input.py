"""Bad input meets a typed error, one clear line, the offending connection closed, and the
runner goes on serving."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import pytest
from ambrosia_services.jobs import Check, JobConnection, Role
from ambrosia_services.jobs.errors import SparkServerError
from ambrosia_services.jobs.spark import ConnectServer
from ambrosia_services.jobs.transport import HELLO_MAGIC, Hello, exchange_hello

from tests.launcher import until, wait_until

from .conftest import ROOT

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(120)]

COORDINATOR = uuid.UUID("c3c3c3c3-c3c3-c3c3-c3c3-c3c3c3c3c3c3")


def test_a_wrong_hello_and_a_bad_frame_close_only_their_connections(runners) -> None:
    runner = runners()

    async def scenario() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: example.org\r\n\r\n")  # a hello's 36 bytes
        async with asyncio.timeout(10):
            assert (await reader.read()).startswith(HELLO_MAGIC)  # its hello, then closed
        writer.close()

        reader, writer = await asyncio.open_connection("127.0.0.1", runner.port)
        assert (await exchange_hello(reader, writer, Hello(COORDINATOR))).peer == runner.member
        writer.write(bytes.fromhex("00000001 09"))  # a frame of message type 9
        async with asyncio.timeout(10):
            rest = await reader.read()  # the runner's check, then closed
        conn = JobConnection(Role.INITIATOR, Role.PARTICIPANT)
        conn.receive_data(rest)
        assert list(conn.events()) == [Check(())]
        writer.close()

        reader, writer = await asyncio.open_connection("127.0.0.1", runner.port)
        assert (await exchange_hello(reader, writer, Hello(COORDINATOR))).peer == runner.member
        writer.close()

    asyncio.run(scenario())
    log = runner.log_text()
    assert "not a job link hello: b'GET / HT' instead of b'AMBJOB02'" in log
    assert "closing connection from initiator" in log and "message type" in log
    assert "Traceback" not in log


def test_a_runner_given_a_module_without_jobs_exits_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ambrosia_services.jobs.runner", "--listen", "127.0.0.1:0",
         "--connect", "sc://127.0.0.1:1", "--jobs", "json", "--member", "x", "--dir", "o"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "python -m ambrosia_services.jobs.runner: error: invalid job modules for 1 "
        "reason(s): module json defines no @spark_job function\n"
    )


def test_a_connect_server_on_a_taken_port_is_refused(connect_server: ConnectServer,
                                                       tmp_path) -> None:
    with pytest.raises(SparkServerError, match=f"port {connect_server.port} is already in use"):
        ConnectServer(connect_server.port, log_dir=tmp_path).start()


def test_a_failed_attempt_and_a_stop_with_jobs_queued_are_one_line_each(runners) -> None:
    """A job's error is one line (Spark's traceback runs to dozens, at DEBUG only), and a
    runner stopped with jobs still queued says so per job, with no CancelledError
    traceback for each."""
    from ambrosia_services.jobs import InitiatorJobs
    from ambrosia_services.jobs.attempts import Attempt, plan_params
    from ambrosia_services.jobs.link import JobLinks, RunnerAddress

    runner = runners(extra=("--workers", "1"))

    async def scenario() -> None:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
        async with links:
            links.start("wordcount", plan_params(Attempt("bad", 1),
                                                 {"input": "/nonexistent/words.txt"}),
                        [runner.member])
            for i in range(4):  # one runs, three wait for the worker
                links.start("sleepy", plan_params(Attempt(f"slow-{i}", 1),
                                                  {"rows": 4, "sleep_ms": 3000}),
                            [runner.member])
            # The failure first: then the sleepers hold the worker.
            await until(lambda: "PATH_NOT_FOUND" in runner.log_text(), "the failed job")

    asyncio.run(scenario())
    assert runner.process is not None
    runner.process.terminate()
    runner.process.wait(60)
    log = runner.log_text()
    failed = [line for line in log.splitlines() if "PATH_NOT_FOUND" in line]
    assert len(failed) == 1, log[-3000:]
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]


def test_a_stop_while_the_server_starts_takes_its_jvm_down_too(tmp_path) -> None:
    """SIGTERM during the 15-20 s of JVM start-up used to leave the JVM running and holding
    the port (the handlers came after the start), so the next start failed."""
    import signal
    import socket
    from pathlib import Path

    from ambrosia_core.ports import free_ports

    (port,) = free_ports(1)
    proc = subprocess.Popen([sys.executable, "-m", "ambrosia_services.jobs.spark.server",
                             "--listen", f":{port}", "--log-dir", str(tmp_path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def children() -> list[str]:
        path = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        return path.read_text().split() if path.exists() else []

    def gone(pid: int) -> bool:
        try:
            return "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        except FileNotFoundError:
            return True

    try:
        jvm = int(wait_until(children, "the JVM started")[0])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert err.strip().splitlines()[-1] == "stopped (SIGTERM) before the server was ready"
    assert "Traceback" not in err and "RuntimeWarning" not in err
    wait_until(lambda: gone(jvm), "the JVM gone with its server")
    with socket.socket() as s:  # the port is free for the next start
        s.bind(("127.0.0.1", port))


def test_a_runner_that_cannot_reach_spark_says_so_at_start(tmp_path) -> None:
    from ambrosia_core.ports import free_ports

    from .conftest import RunnerProcess

    (nowhere,) = free_ports(1)
    runner = RunnerProcess("r9", f"sc://127.0.0.1:{nowhere}", tmp_path / "out",
                           tmp_path / "r9.log").start()
    try:
        wait_until(lambda: "cannot reach Spark Connect" in runner.log_text(),
                   "the runner saying Spark Connect is out of reach")
        line = next(ln for ln in runner.log_text().splitlines() if "cannot reach" in ln)
        assert f"cannot reach Spark Connect at 127.0.0.1:{nowhere} (Connection refused)" in line
    finally:
        runner.kill()
