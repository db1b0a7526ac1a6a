"""``ambrosia list`` and ``ambrosia stop -i NAME``, run as a user runs them, against a real
immortal under ``ambrosia run`` and a real flock."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_cli.instances import lock_holder
from ambrosia_py.testing import start_immortal
from tests.launcher import ROOT

pytestmark = pytest.mark.integration


def _ambrosia(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMBROSIA_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_list_shows_a_running_instance_and_stop_stops_it_as_sigterm_does(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    empty = _ambrosia(home, "list")
    assert (empty.returncode, empty.stdout) == (0, f"no instances registered in {home}\n")

    p = start_immortal("samples.counter.counter:Counter", "counter", home=home, cwd=ROOT)
    try:
        listed = _ambrosia(home, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = json.loads(listed.stdout)
        reg = registry.load("counter", home)
        assert row["name"] == "counter" and row["running"] is True
        assert (row["role"], row["replicas"], row["version"]) == ("standalone", 1, 0)
        assert (row["receive_port"], row["send_port"], row["ic_port"]) == (
            reg.receive_port, reg.send_port, reg.ic_port)
        coordinator = row["pid"]  # the lock's holder: the coordinator ambrosia run started
        assert coordinator != p.proc.pid
        ppid = int(Path(f"/proc/{coordinator}/stat").read_text().rpartition(")")[2].split()[1])
        assert ppid == p.proc.pid

        stopped = _ambrosia(home, "stop", "-i", "counter")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout == (f"stopped counter (SIGTERM to ambrosia run, pid "
                                  f"{p.proc.pid})\n")
        assert p.proc.wait(30) == 0  # an ordinary stop
        p.stop()
        assert p.lines[-1] == "ambrosia run: counter stopped (SIGTERM)"
    finally:
        p.kill()

    table = _ambrosia(home, "list")
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["name", "state", "role"]
    assert lines[1].split()[:3] == ["counter", "stopped", "standalone"]
    again = _ambrosia(home, "stop", "-i", "counter")
    assert again.returncode == 1
    assert again.stderr.startswith("ambrosia: error: counter is not running (no coordinator "
                                   "holds ")
    unknown = _ambrosia(home, "stop", "-i", "nobody")
    assert unknown.returncode == 1 and "'nobody' is not registered" in unknown.stderr


def test_the_holder_of_a_flock_is_found_by_its_pid(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.touch()
    assert lock_holder(lock) is None
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(lock)!r})\nfcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert lock_holder(lock) == holder.pid
        with open(lock) as f:  # a lock of this process on another file is not it
            other = tmp_path / "other"
            other.touch()
            with open(other) as g:
                fcntl.flock(g, fcntl.LOCK_EX)
                assert lock_holder(lock) == holder.pid
                assert lock_holder(other) == os.getpid()
            del f
    finally:
        holder.kill()
        holder.wait()
    assert lock_holder(lock) is None
    assert lock_holder(tmp_path / "missing") is None
