"""``ambrosia status -i NAME``: a real connector coordinator under ``ambrosia run``, a real
feed, and the command run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_cli.status import render
from ambrosia_cli.status_file import DEFAULT_NAME
from ambrosia_core.ports import free_ports
from ambrosia_py.testing import start_immortal
from tests.launcher import ROOT

pytestmark = pytest.mark.integration


def _free_port() -> int:
    """A free port on 127.0.0.1, below the ephemeral range (see ``ambrosia_core.ports``)."""
    return free_ports(1)[0]


def _status(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMBROSIA_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", "status", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_status_shows_a_running_coordinators_streams_and_sinks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port, sink_port = free_ports(2)  # no sink listens on the second: shown as not linked
    data = tmp_path / "lines.txt"
    data.write_text("".join(f"line {i}\n" for i in range(50)))
    assert "not registered" in _status(home, "-i", "coord").stderr

    coord = start_immortal(
        "ambrosia_services.connectors:ConnectorCoordinator", "coord", home=home, cwd=tmp_path,
        args=["--set", f"listen=127.0.0.1:{port}", "--set", f"sinks.out=127.0.0.1:{sink_port}",
              "--set", "status_file=run/status.json", "--set", "status_seconds=0.2"])
    (tmp_path / "run").mkdir()
    try:
        feed = subprocess.run(
            [sys.executable, "-m", "ambrosia_services.connectors.clients.feed", "--connect",
             f"127.0.0.1:{port}", "--once", str(data)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert feed.returncode == 0, feed.stderr
        deadline = time.monotonic() + 30
        while True:
            out = _status(home, "-i", "coord")
            # Received, acked and closed are counted at different moments: wait for all.
            if out.returncode == 0 and "acked 50" in out.stdout and out.stdout.count(
                    " yes") >= 1:
                break
            assert time.monotonic() < deadline, out.stdout + out.stderr
            time.sleep(0.2)
        lines = out.stdout.splitlines()
        assert lines[0].startswith("coord: status of ") and "received 50, acked 50" in lines[0]
        streams = lines.index("streams:")
        assert lines[streams + 1].split() == ["stream", "name", "applied", "dropped", "por",
                                              "closed", "lines"]
        # The point of reference is the last line's offset: 10 lines of 7 bytes, 39 of 8.
        assert lines[streams + 2].split()[1:] == [str(data), "50", "0", "382", "yes", "50"]
        sinks = lines.index("sinks:")
        assert lines[sinks + 1].split()[:3] == ["sink", "linked", "committed"]
        assert lines[sinks + 2].split()[:2] == ["out", "no"]
        assert '"streams"' in _status(home, "-i", "coord", "--json").stdout
        # Relative to the directory `ambrosia run` ran in, as the coordinator opened it.
        assert (tmp_path / "run" / "status.json").exists()
    finally:
        assert coord.stop() == 0
    # Stopped: its last status, written as it stopped, said to be that.
    stopped = _status(home, "-i", "coord")
    assert stopped.returncode == 0, stopped.stderr
    first = stopped.stdout.splitlines()[0]
    assert first.startswith("coord: stopped; its last status, of ") and "acked 50" in first
    report = json.loads(_status(home, "-i", "coord", "--json").stdout)
    assert report["running"] is False and report["age_seconds"] < 60
    # With no status file left, one line says why.
    (tmp_path / "run" / "status.json").unlink()
    gone = _status(home, "-i", "coord")
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr.strip().endswith(
        f"coord is not running (no coordinator holds {home}/logs/coord_0/serverlock) and "
        f"left no status ({tmp_path / 'run' / 'status.json'})")
    assert len(gone.stderr.splitlines()) == 1


def test_status_needs_no_status_file_in_the_configuration(tmp_path: Path) -> None:
    """`ambrosia run` gives a connector coordinator a status file in its instance
    directory when the configuration names none, and `ambrosia status` finds it."""
    home = tmp_path / "home"
    coord = start_immortal(
        "ambrosia_services.connectors:ConnectorCoordinator", "plain", home=home, cwd=tmp_path,
        args=["--set", f"listen=127.0.0.1:{_free_port()}", "--set", "status_seconds=0.2"])
    try:
        deadline = time.monotonic() + 30
        while (out := _status(home, "-i", "plain")).returncode != 0:
            assert "reports no status" in out.stderr, out.stderr
            assert time.monotonic() < deadline, out.stderr
            time.sleep(0.2)
        assert out.stdout.startswith("plain: status of ")
        assert "streams: none" in out.stdout.splitlines()
        instance_dir = registry.instance_dir(registry.load("plain", home))
        assert (instance_dir / DEFAULT_NAME).is_file()
        pointer = json.loads((home / "status" / "plain.json").read_text())
        assert pointer == {"status_file": str(instance_dir / DEFAULT_NAME)}
    finally:
        assert coord.stop() == 0


def test_render_shows_job_counters_and_per_job_rows() -> None:
    report = {"streams": {}, "sinks": {"out": {"committed": 10, "txn": None}},
              "jobs": {"decided": 3, "running": 1, "done": 2, "failed": 0, "attempts": 4},
              "linked": {"out": True}}
    text = render("p", report, 2.4)
    assert text.splitlines() == [
        "p: status of 2 s ago",
        "streams: none",
        "jobs:",
        "  decided  running  done  failed  attempts",
        "        3        1     2       0         4",
        "sinks:",
        "  sink  linked  committed  txn",
        "  out   yes            10  -",
    ]
    pipeline = render("p", {"jobs": {"decided": 2, "done": 1, "recent": [
        ["wordcount-1", "done", 2, ""], ["wordcount-2", "failed", 3, "job failed"]]},
        "batches": {"cut": 2, "emitted": 1},
        "job_links": {"launched": 2, "runners": {"r1@127.0.0.1:7301": True}}}, 0)
    assert render("p", {}, 300, running=False).splitlines()[0] == (
        "p: stopped; its last status, of 5 min ago")
    assert pipeline.splitlines()[2:] == [
        "jobs:",
        "  decided  done",
        "        2     1",
        "recent jobs:",
        "  job          phase   attempts  reason",
        "  wordcount-1  done           2",
        "  wordcount-2  failed         3  job failed",
        "batches:",
        "  cut  emitted",
        "    2        1",
        "job links:",
        "  launched",
        "         2",
        "job links: runners:",
        "  runner             linked",
        "  r1@127.0.0.1:7301  yes",
        "sinks: none",
    ]
    # Status files sort their keys; the columns keep the reading order.
    assert "  running  attempts\n" in render("p", {"jobs": {"attempts": 4, "running": 1}}, 0)
    nested = render("p", {"jobs": {"7": {"state": "running", "attempt": 2}}}, 0)
    assert "  job  state    attempt" in nested and "    7  running        2" in nested


def test_a_crash_is_told_from_a_stop_and_live_counters_are_this_runs(tmp_path: Path) -> None:
    """After a kill -9 the status used to say "stopped", as after an ordinary stop; after a
    restart, "received" (this run) stood unlabelled beside the applied lines of every run."""
    home = tmp_path / "home"
    port = _free_port()
    (tmp_path / "run").mkdir()
    args = ["--set", f"listen=127.0.0.1:{port}", "--set", "status_file=run/status.json",
            "--set", "status_seconds=0.2"]
    data = tmp_path / "lines.txt"
    data.write_text("".join(f"line {i}\n" for i in range(50)))

    def first_line_once(*marks: str) -> str:
        deadline = time.monotonic() + 30
        while True:
            out = _status(home, "-i", "coord")
            if out.returncode == 0 and all(m in out.stdout for m in marks):
                return out.stdout.splitlines()[0]
            assert time.monotonic() < deadline, out.stdout + out.stderr
            time.sleep(0.2)

    coord = start_immortal("ambrosia_services.connectors:ConnectorCoordinator", "coord",
                           home=home, cwd=tmp_path, args=args)
    try:
        feed = subprocess.run(
            [sys.executable, "-m", "ambrosia_services.connectors.clients.feed", "--connect",
             f"127.0.0.1:{port}", "--once", str(data)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert feed.returncode == 0, feed.stderr
        line = first_line_once("acked 50")
        assert "; this run (since " in line and line.endswith(
            "): connections 0, received 50, acked 50, lag 0"), line
        pid = json.loads(_status(home, "-i", "coord", "--json").stdout)["pid"]
    finally:
        coord.kill()  # kill -9: no last status is written
    crashed = _status(home, "-i", "coord")
    assert crashed.returncode == 0, crashed.stderr
    assert crashed.stdout.startswith(
        f"coord: crashed: its process ({pid}) ended without writing its last status (kill "
        "-9, a crash, a power cut); its last status, of "), crashed.stdout
    assert json.loads(_status(home, "-i", "coord", "--json").stdout)["state"] == "crashed"

    coord = start_immortal("ambrosia_services.connectors:ConnectorCoordinator", "coord",
                           home=home, cwd=tmp_path, args=args)
    try:
        # A new run: its own counters from zero, the state's 50 lines applied in all.
        line = first_line_once("status of", "received 0")
        assert line.endswith("): connections 0, received 0, acked 0, lag 0"), line
        out = _status(home, "-i", "coord").stdout.splitlines()
        streams = out.index("streams:")
        assert out[streams + 2].split()[2] == "50"  # applied, of every run
    finally:
        assert coord.stop() == 0
    stopped = _status(home, "-i", "coord").stdout
    assert stopped.startswith("coord: stopped; its last status, of "), stopped
    assert "\nstopped:" not in stopped  # the mark is said in the first line, not a table
    assert json.loads(_status(home, "-i", "coord", "--json").stdout)["state"] == "stopped"


def test_render_names_how_an_instance_ended(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now
    at = time.time() - 60
    counters = {"port": 7100, "connections": 1, "received": 5, "acked": 4, "lag": 1}
    assert render("p", {**counters, "pid": gone.pid, "run_started": at}, 3,
                  running=False).splitlines()[0] == (
        f"p: crashed: its process ({gone.pid}) ended without writing its last status (kill "
        "-9, a crash, a power cut); its last status, of 3 s ago, sources on port 7100; "
        f"this run (since {time.strftime('%H:%M:%S', time.localtime(at))}): "
        "connections 1, received 5, acked 4, lag 1")
    assert render("p", {"pid": os.getpid()}, 3, running=False).startswith(
        f"p: stopping: no coordinator holds its lock, its process ({os.getpid()}) has not "
        "ended yet; ")
    lost = {"pid": gone.pid, "stopped": {"time": at, "reason": "coordinator lost"}}
    assert render("p", lost, 3, running=False).splitlines()[0] == (
        "p: stopped (coordinator lost); its last status, of 3 s ago")
    assert render("p", {"pid": gone.pid, "stopped": {"time": at, "reason": "stopped"}}, 3,
                  running=False).splitlines()[0] == "p: stopped; its last status, of 3 s ago"
    # An older status (no pid) cannot tell: stopped, as before; no "this run" label.
    assert render("p", counters, 3, running=False).splitlines()[0] == (
        "p: stopped; its last status, of 3 s ago, sources on port 7100, connections 1, "
        "received 5, acked 4, lag 1")
