"""A coordinator that cannot start: `ambrosia run` says why in one line, at once, and waits
only where waiting helps (the previous run's coordinator still holding the log lock)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic import launch
from ambrosia_ic.logstore import LOCK_NAME, LogScan, log_path, scan_log

from ambrosia_py.testing import start_immortal
from tests.launcher import ROOT, wait_until

from .conftest import Harness
from .test_cli import _one_line_error
from .test_first_start import _run_chain

pytestmark = pytest.mark.integration

COUNTER = "samples.counter.counter:Counter"

# "At once" is the absence of a wait, not a speed: every wait a start has is said in a line
# on stderr (the log lock's 5 s, a held port's 65 s), which the tests compare whole, and
# the silent ones are the port's 65 s and a readiness wait's 90 s. A failure within this
# many seconds had neither, however slowly a busy machine started the processes.
AT_ONCE = 30.0


def _env(harness: Harness) -> dict[str, str]:
    return dict(harness.env, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))


def _run(harness: Harness, name: str, *extra: str) -> tuple[subprocess.CompletedProcess[str],
                                                             float]:
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", COUNTER, "-i", name, *extra],
                       env=_env(harness), cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r, time.monotonic() - started


def _run_timing_lines(harness: Harness, name: str, *extra: str) -> tuple[
        subprocess.CompletedProcess[str], float, list[float]]:
    """``_run``, with the time since the start at which each stderr line was read."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ambrosia_cli", "run", COUNTER, "-i", name,
                             *extra], env=_env(harness), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    read_at: list[float] = []
    with proc:
        for line in proc.stderr:  # the run prints a few lines: stdout's pipe cannot fill
            lines.append(line)
            read_at.append(time.monotonic() - started)
        out = proc.stdout.read() if proc.stdout is not None else ""
        code = proc.wait(timeout=120)
    took = time.monotonic() - started
    return subprocess.CompletedProcess(proc.args, code, out, "".join(lines)), took, read_at


def test_a_busy_port_is_one_line_at_once(harness: Harness) -> None:
    reg = harness.register("svc")
    with socket_listening(reg.send_port):
        r, took = _run(harness, "svc")
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr.splitlines() == [
            f"ambrosia run: error: the coordinator of svc did not start: cannot listen on "
            f"127.0.0.1:{reg.send_port} (the send port): Address already in use"]
        assert took < AT_ONCE  # no retrying: the port's 65 s wait is for a connection only
        line = _one_line_error(harness.cli("ic", "-i", "svc"), 1)
        assert line == (f"ambrosia: error: cannot listen on 127.0.0.1:{reg.send_port} (the send "
                        "port): Address already in use")


def test_a_port_held_by_a_connection_is_waited_for_once(harness: Harness) -> None:
    # Another program's outgoing connection got the receive port as its local port: no one
    # listens there, and the port frees itself when that connection ends.
    import socket

    reg = harness.register("svc")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.socket()
    client.bind(("127.0.0.1", reg.receive_port))
    client.connect(server.getsockname())
    accepted, _ = server.accept()

    said = (f"ambrosia-ic: svc: the receive port {reg.receive_port} is held by a connection "
            "(or one in TIME_WAIT), not a listener; waiting up to 65 s for it\n")
    err = harness.tmp / "svc.err"
    started: list[Any] = []

    def start() -> None:
        with open(err, "w") as f:
            try:
                started.append(launch.start_coordinator("svc", home=harness.home, stderr=f,
                                                        options=harness.options))
            except BaseException as exc:  # the test says what went wrong
                started.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    try:
        # The connection ends once the coordinator says it waits for the port, and not
        # before: it is not ready while the connection holds the port.
        wait_until(lambda: said in _text(err) or not starting.is_alive(), "the wait for the port")
        assert started == [] and _text(err) == said
    finally:
        accepted.close()  # the far side closes first: no TIME_WAIT on the receive port
        client.close()
        server.close()
        starting.join(120)
    [proc] = started
    assert isinstance(proc, subprocess.Popen), proc
    harness.procs.append(proc)
    assert proc.poll() is None
    assert err.read_text() == said  # waited for once, then started


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_damaged_log_is_one_line_at_once(harness: Harness) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 4)
    harness.kill9(proc)
    path = log_path(harness.instance_dir("alpha"), 1)
    victim = list(LogScan(path))[2]
    data = bytearray(path.read_bytes())
    data[victim.offset + 25] ^= 0x55
    path.write_bytes(bytes(data))
    r, took = _run(harness, "alpha", "--log-level", "WARNING")
    assert (r.returncode, r.stdout) == (1, "")
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"ambrosia run: error: the coordinator of alpha did not start: "
                               f"{path}: damaged at offset {victim.offset}: ")
    assert took < AT_ONCE  # no wait for a readiness that cannot come


def test_an_instance_already_running_is_refused_after_one_short_wait(harness: Harness) -> None:
    first = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    try:
        r, took, read_at = _run_timing_lines(harness, "counter", "--log-level", "WARNING")
        assert (r.returncode, r.stdout) == (1, "")
        lock = harness.home / "logs" / "counter_0" / LOCK_NAME
        lines = r.stderr.splitlines()
        assert len(lines) == 2, r.stderr  # one wait, said once
        assert lines[0].endswith(
            "ambrosia.counter: the log of counter is locked by another coordinator (the "
            "previous run's may still be exiting); waiting up to 5 s for it")
        assert lines[1].startswith("ambrosia run: error: the coordinator of counter did not "
                                   "start: ")
        assert str(lock) in lines[1] and lines[1].endswith("(is counter already running?)")
        # The 5 s wait, not the port's 65 s: counted from the line that announces it, so a
        # slow start of the processes before and after it does not count.
        assert took >= 5 and took - read_at[0] < AT_ONCE
    finally:
        first.stop()


def test_a_lock_let_go_of_while_waiting_is_a_normal_start(harness: Harness) -> None:
    # The previous run's coordinator, still exiting: here a real flock on the log lock,
    # released after a second.
    first = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    first.stop()
    lock = harness.home / "logs" / "counter_0" / LOCK_NAME
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        second = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT,
                                primary=False)
        # Let go once the coordinator says it waits (a timer raced a slow start).
        second.wait_for("is locked by another coordinator", 60)
    finally:
        os.close(fd)
    second.wait_for("became primary", 60)
    second.stop()
    waits = [ln for ln in second.lines if "is locked by another coordinator" in ln]
    assert len(waits) == 1
    assert any("became primary" in ln for ln in second.lines)


def test_a_new_instance_whose_drawn_port_was_taken_is_registered_again(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """``ambrosia run`` draws a new instance's ports; another program may listen on one
    before the coordinator does. The first start draws again rather than leave a
    registration every start fails on."""
    import logging

    from ambrosia_cli import local_coordinator

    reg = harness.register("svc")  # as run registers it, just now
    with socket_listening(reg.send_port), caplog.at_level(logging.WARNING):
        proc, now = local_coordinator.start_new(reg, harness.home, logging.getLogger("t"))
    harness.procs.append(proc)
    assert now == harness.reg("svc")  # stored, and what the coordinator was started with
    assert now.send_port != reg.send_port
    assert (now.committer_id, now.log_dir, now.current_version) == (
        reg.committer_id, reg.log_dir, reg.current_version)
    [said] = caplog.messages
    assert said == (f"the coordinator of svc did not start: cannot listen on 127.0.0.1:"
                    f"{reg.send_port} (the send port): Address already in use; registering "
                    f"svc again with new ports (receive port {now.receive_port}, send port "
                    f"{now.send_port})")
    d = harness.drive("svc")  # a binding on the new ports gets the first start
    wait_until(d.primary.is_set, "primary")


def test_a_new_instance_gives_up_after_three_draws(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from ambrosia_ic import registry

    from ambrosia_cli import local_coordinator
    from ambrosia_core.errors import CoordinatorError
    from ambrosia_core.ports import free_ports

    reg = harness.register("svc")
    held = [free_ports(3) for _ in range(2)]  # (receive, send, link) ports drawn next
    draws = iter(held)
    monkeypatch.setattr(registry, "unregistered_free_ports", lambda n, home: next(draws))
    ports = [reg.send_port] + [h[1] for h in held]
    listening = [socket_listening(p) for p in ports]
    try:
        with pytest.raises(CoordinatorError, match=f"127.0.0.1:{ports[-1]} .the send port.: "
                                                   "Address already in use"):
            local_coordinator.start_new(reg, harness.home, logging.getLogger("t"))
    finally:
        for s in listening:
            s.__exit__()
    assert next(draws, None) is None  # two draws after the first ports: three tries


def test_only_a_port_in_use_is_a_reason_to_draw_again() -> None:
    from ambrosia_cli.local_coordinator import port_taken
    from ambrosia_core.errors import CoordinatorError

    assert port_taken(CoordinatorError(
        "svc did not start: cannot listen for links on 127.0.0.1:7: Address already in use"))
    assert not port_taken(CoordinatorError(
        "svc did not start: cannot listen for links on 10.9.9.9:7: Cannot assign requested "
        "address"))
    assert not port_taken(CoordinatorError("svc did not start: the log directory is full"))


class socket_listening:  # noqa: N801 - used as a context manager, like contextlib's
    """Hold ``port`` with a listening socket (another program on the coordinator's port)."""

    def __init__(self, port: int) -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_repro_of_a_damaged_checkpoint_is_the_coordinators_reason(harness: Harness) -> None:
    from ambrosia_core.errors import CoordinatorError
    from ambrosia_py.testing import repro
    from samples.counter.counter import Counter

    p = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    p.stop()
    # A checkpoint that is not kept never reaches the coordinator: repro names the kept ones.
    with pytest.raises(CoordinatorError) as info:
        repro("counter", Counter, checkpoint=7, home=harness.home)
    assert str(info.value) == "counter has no checkpoint 7 to replay from (kept: 1)"
    # A kept one that is damaged: debug-instance refuses it, and that reason comes through.
    path = harness.home / "logs" / "counter_0" / "serverchkpt1"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CoordinatorError) as info:
        repro("counter", Counter, checkpoint=1, home=harness.home)
    # The coordinator's own reason, once, with nothing tacked on (its wording is its own).
    message = str(info.value)
    assert message.startswith(f"ambrosia debug-instance did not start: {path}: damaged at ")
    assert not message.endswith(": ") and message.count(str(path)) == 1


def test_the_coordinators_stderr_reaches_the_callers_file_whole(harness: Harness) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 2)
    harness.kill9(proc)
    path = log_path(harness.instance_dir("alpha"), 1)
    # A torn tail (past the last record: zeros written ahead): said on stderr before ready.
    os.truncate(path, scan_log(path)[1].good_end - 3)
    err = harness.tmp / "alpha.err"
    with open(err, "w") as f:
        proc = launch.start_coordinator("alpha", home=harness.home, stderr=f)
        proc.send_signal(signal.SIGTERM)
        out, rest = proc.communicate(timeout=30)
    # communicate() leaves stderr to the copy, which has finished once it returns.
    assert (proc.returncode, out, rest) == (
        0, "ambrosia-ic stopped: instance=alpha signal=SIGTERM\n", None)
    lines = err.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"ambrosia-ic: alpha: cutting a torn record off {path} at offset ")
