"""The child-process helper with real children: awaited lines, a child that dies first, a
timeout, and stops and kills that leave nothing of the child's process group running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ambrosia_core.errors import AmbrosiaError
from ambrosia_core.processes import (
    Child,
    ChildEndedError,
    ChildError,
    ChildTimeoutError,
    stop_process,
)
from tests.launcher import wait_until

# A child that ignores SIGTERM and starts a grandchild (in its group) that ignores it too.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print("grandchild", grandchild.pid, flush=True)
time.sleep(120)
"""


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def group_members(pgid: int) -> list[int]:
    """The running processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def test_an_awaited_line_arrives_and_the_count_picks_which(children: list[Child]) -> None:
    child = Child.start(python("""
        import sys, time
        print("starting", flush=True)
        time.sleep(0.3)
        print("ready 1", flush=True)
        print("ready 2", file=sys.stderr, flush=True)
        time.sleep(60)
    """), name="waiter")
    children.append(child)
    assert child.wait_for("ready", timeout=30) == "ready 1"
    assert child.wait_for("ready", timeout=30, count=2) == "ready 2"  # stderr is kept too
    assert child.lines == ["starting", "ready 1", "ready 2"]
    assert child.alive()


def test_a_child_that_ends_first_is_reported_with_its_exit_code_and_last_lines(
        children: list[Child]) -> None:
    child = Child.start(python("""
        import sys
        print("one")
        print("two", file=sys.stderr)
        sys.exit(3)
    """), name="quitter")
    children.append(child)
    with pytest.raises(ChildEndedError) as info:
        child.wait_for("never said", timeout=30)
    err = info.value
    assert isinstance(err, ChildError) and isinstance(err, AmbrosiaError)
    assert err.returncode == 3
    assert err.last_lines == ["one", "two"]
    assert str(err) == ("quitter ended (exit code 3) before saying 'never said'; its last "
                        "lines:\n  one\n  two")


def test_a_timeout_says_so_and_leaves_the_child_running(children: list[Child]) -> None:
    child = Child.start(python("print('hello', flush=True); import time; time.sleep(60)"),
                        name="sleeper")
    children.append(child)
    child.wait_for("hello", timeout=30)
    started = time.monotonic()
    with pytest.raises(ChildTimeoutError) as info:
        child.wait_for("never said", timeout=0.3)
    assert time.monotonic() - started < 5
    assert isinstance(info.value, TimeoutError)
    assert str(info.value) == ("sleeper did not say 'never said' within 0.3 s; its last "
                               "lines:\n  hello")
    assert child.alive()


def test_stop_of_a_child_that_ignores_sigterm_ends_it_and_its_grandchild(
        children: list[Child]) -> None:
    child = Child.start(python(STUBBORN), name="stubborn")
    children.append(child)
    grandchild = int(child.wait_for("grandchild", timeout=30).split()[1])
    started = time.monotonic()
    assert child.stop(timeout=0.5) == -signal.SIGKILL
    assert time.monotonic() - started < 10
    wait_until(lambda: gone(grandchild), "the grandchild gone after the stop")
    assert not child.alive()


def test_stop_is_an_ordinary_stop_first(children: list[Child]) -> None:
    child = Child.start(python("""
        import signal, sys, time
        def bye(*_):
            print("stopping cleanly", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("up", flush=True)
        time.sleep(60)
    """))
    children.append(child)
    child.wait_for("up", timeout=30)
    assert child.stop(timeout=20) == 0
    assert child.lines[-1] == "stopping cleanly"  # all of its output read by then


def test_kill_leaves_no_process_of_the_group_alive(children: list[Child]) -> None:
    child = Child.start(python(STUBBORN))
    children.append(child)
    child.wait_for("grandchild", timeout=30)
    assert len(group_members(child.pid)) == 2
    assert child.kill() == -signal.SIGKILL
    wait_until(lambda: not group_members(child.pid), "no process of the group left")


def test_a_child_writing_to_a_log_file_is_read_from_where_its_run_began(
        tmp_path: Path, children: list[Child]) -> None:
    log = tmp_path / "logs" / "child.log"
    first = Child.start(python("print('first run'); import sys; sys.exit(1)"), log=log)
    assert first.wait() == 1
    second = Child.start(python("""
        import sys, time
        print("second run", flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        time.sleep(60)
    """), name="logger", log=log)
    children.append(second)
    assert second.wait_for("stderr", timeout=30) == "to stderr"
    assert second.lines == ["second run", "to stderr"]
    assert log.read_text() == "first run\nsecond run\nto stderr\n"
    second.kill()
    with pytest.raises(ChildEndedError, match=r"^logger ended \(killed by SIGKILL\) before "
                       rf"saying 'more' \(log {log}\); its last lines:\n  second run\n"):
        second.wait_for("more", timeout=30)


def test_stop_process_stops_a_group_started_elsewhere() -> None:
    proc = subprocess.Popen(python(STUBBORN), stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        grandchild = int(proc.stdout.readline().split()[1])
        assert stop_process(proc, 0.5, terminate_group=True) == -signal.SIGKILL
        wait_until(lambda: gone(grandchild), "the grandchild gone after the stop")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_child_with_no_output_to_watch_is_refused() -> None:
    proc = subprocess.Popen(python("pass"), stdout=subprocess.DEVNULL, text=True)
    try:
        with pytest.raises(ChildError, match=r"^x has neither an output pipe nor a log file"):
            Child(proc, name="x")
    finally:
        proc.wait()
