"""The status page's server without a browser: ``/status.json`` over a real socket on
127.0.0.1 for a registered instance whose log lock a real process holds, the history the
server keeps across the instance's lives, what it refuses (other paths, other methods,
other hosts), and ``--listen`` as a user runs it."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic import registry
from ambrosia_ic.logstore import LOCK_NAME

from ambrosia_cli.status_page import (
    PageServer,
    StatusSource,
    merge_history,
    page_files,
    sample_of,
)
from ambrosia_core.addresses import Address
from ambrosia_core.ports import free_ports
from ambrosia_core.processes import Child
from tests.launcher import ROOT


def _sample(t: float, applied: int = 0) -> dict[str, Any]:
    return {"time": t, "received": applied, "acked": applied, "applied": applied}


def test_the_history_is_the_kept_samples_then_the_newer_ones() -> None:
    kept = [_sample(10), _sample(11)]
    # The same file read again adds nothing; its newer samples are appended in order.
    assert merge_history(kept, [_sample(10), _sample(11)]) == kept
    assert merge_history(kept, [_sample(11), _sample(12, 5), _sample(13, 9)]) == [
        *kept, _sample(12, 5), _sample(13, 9)]
    # A new life starts its history afresh: what the server kept stays before it.
    assert [s["time"] for s in merge_history(kept, [_sample(20), _sample(21)])] == [
        10, 11, 20, 21]
    # Damaged or out-of-order entries are left out; the newest `keep` are kept.
    assert merge_history([], [_sample(3), "x", {"time": "now"}, {"time": True}, _sample(2),
                              _sample(4)]) == [_sample(3), _sample(4)]
    assert merge_history(kept, [_sample(t) for t in range(12, 20)], keep=3) == [
        _sample(17), _sample(18), _sample(19)]


def test_a_report_without_history_is_sampled_from_its_counters() -> None:
    report = {"received": 7, "acked": 6,
              "streams": {"1": {"applied": 4, "lines": 40}, "2": {"applied": 2, "lines": 5}},
              "sinks": {"out": {"committed": 99}}}
    assert sample_of(report, 123.4567) == {
        "time": 123.457, "received": 7, "acked": 6, "applied": 6, "lines": 45,
        "committed": {"out": 99}, "commits": None, "latency_ms": None,
        "latency_max_ms": None}
    assert sample_of({}, 1)["applied"] == 0


# ------------------------------------------------------------------ over a socket


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[tuple[Path, Path, Child]]:
    """An active/active instance with two replicas, registered in a home of its own,
    whose log lock a process started as replica 1 holds; its status file path."""
    home = tmp_path / "home"
    ports = free_ports(6)
    reg = registry.register(instance_name="svc", receive_port=ports[0], send_port=ports[1],
                            ic_port=ports[2], log_dir=tmp_path / "logs", active_active=True,
                            home=home)
    registry.add_replica(instance_name="svc", replica=1, receive_port=ports[3],
                         send_port=ports[4], ic_port=ports[5], home=home)
    lock = registry.instance_dir(reg) / LOCK_NAME
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    holder = Child.start(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         "f = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(120)\n", str(lock), "--replica", "1"],
        name="the lock holder")
    holder.wait_for("held", 30)
    try:
        yield home, tmp_path / "status.json", holder
    finally:
        holder.kill()


@pytest.fixture
def server(instance: tuple[Path, Path, Child]) -> Iterator[PageServer]:
    home, status_file, _holder = instance
    source = StatusSource("svc", home, status_file)
    srv = PageServer(Address("127.0.0.1", 0), source, page_files())
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _request(srv: PageServer, path: str, method: str = "GET",
             host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    port = srv.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        conn.close()


def _status(srv: PageServer) -> dict[str, Any]:
    status, headers, body = _request(srv, "/status.json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert headers["Cache-Control"] == "no-store"
    doc: dict[str, Any] = json.loads(body)
    return doc


def _write(path: Path, report: dict[str, Any], age: float = 0.0) -> None:
    path.write_text(json.dumps(report))
    at = time.time() - age
    os.utime(path, (at, at))


def test_status_json_serves_the_report_replicas_history_and_errors(
        instance: tuple[Path, Path, Child], server: PageServer) -> None:
    _home, status_file, holder = instance
    # No status file yet: one line says so, and the rest is served.
    doc = _status(server)
    assert doc["error"] == ("svc is running but reports no status: no "
                            f"{status_file} (set status_file in its configuration)")
    assert doc["report"] is None and doc["history"] == [] and doc["running"] is True

    now = time.time()
    first_life = [_sample(now - 3, 10), _sample(now - 2, 20)]
    errors = [{"time": now - 2, "level": "WARNING", "logger": "ambrosia.svc",
               "message": "sink out (127.0.0.1:1): Connection refused; reconnecting"}]
    _write(status_file, {"received": 20, "streams": {"1": {"applied": 20}}, "sinks": {},
                         "history": first_life, "errors": errors}, age=2)
    doc = _status(server)
    assert doc["error"] is None and doc["running"] is True
    assert 1.5 < doc["age_seconds"] < 10
    assert doc["report"] == {"received": 20, "streams": {"1": {"applied": 20}}, "sinks": {}}
    assert doc["history"] == first_life and doc["errors"] == errors
    # Replica 1 holds the log lock (its process says --replica 1); replica 0 does not.
    assert doc["instance"]["role"] == "active/active" and doc["instance"]["pid"] == holder.pid
    rows = {r["replica"]: r for r in doc["replicas"]}
    assert rows[1]["log_lock"] == f"held (pid {holder.pid})" and rows[0]["log_lock"] == "-"
    assert rows[1]["links_at"] == f"127.0.0.1:{rows[1]['ic_port']}"

    # A new life writes a history of its own: the server keeps the first life's before it.
    second_life = [_sample(now - 1, 3), _sample(now, 5)]
    _write(status_file, {"streams": {}, "history": second_life})
    assert _status(server)["history"] == first_life + second_life
    # A file without a history: the server samples its counters, at the file's time.
    _write(status_file, {"received": 8, "streams": {"1": {"applied": 8}}}, age=0)
    history = _status(server)["history"]
    assert len(history) == 5 and history[-1]["applied"] == 8
    assert history[-1]["time"] > now - 1
    # An unreadable file is said in one line, and the history stays.
    status_file.write_text("{not json")
    doc = _status(server)
    assert doc["error"].startswith(f"{status_file}: not a status report: ")
    assert len(doc["history"]) == 5 and doc["report"] is None

    # Stopped: the lock is let go, and the last status is said to be that.
    holder.kill()
    _write(status_file, {"streams": {}}, age=30)
    doc = _status(server)
    assert doc["running"] is False and doc["age_seconds"] >= 29
    assert all(r["log_lock"] == "-" for r in doc["replicas"])


def test_the_page_files_and_nothing_else(server: PageServer) -> None:
    status, headers, body = _request(server, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<script src="page.js"' in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    for path, kind in (("/page.js", "text/javascript"), ("/page.css", "text/css"),
                       ("/index.html", "text/html")):
        status, headers, body = _request(server, path)
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
    assert _request(server, "/status.json?t=1")[0] == 200  # a query is no other path

    for path in ("/nothing", "/page/page.js", "/../pyproject.toml", "/status.json/x"):
        status, _headers, body = _request(server, path)
        assert status == 404 and b"the page is at /" in body, path
    for method in ("POST", "PUT", "DELETE", "HEAD", "PATCH", "BREW"):
        status, headers, _body = _request(server, "/status.json", method)
        assert (status, headers.get("Allow")) == (405, "GET"), method
    # On loopback, only requests for a loopback name (no rebinding of a foreign name).
    assert _request(server, "/status.json", host="evil.example:80")[0] == 421
    for host in ("localhost", f"127.0.0.1:{server.server_address[1]}", "[::1]:80"):
        assert _request(server, "/status.json", host=host)[0] == 200, host


# ------------------------------------------------------------------ --listen, as a user runs it


def _serve(home: Path, *args: str) -> Child:
    return Child.start([sys.executable, "-m", "ambrosia_cli", "status", "-i", "svc", *args],
                       env=dict(os.environ, AMBROSIA_HOME=str(home)), cwd=ROOT,
                       name="ambrosia status --listen")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_its_url_and_stops_on_a_signal_with_0(
        instance: tuple[Path, Path, Child], signum: int) -> None:
    home, status_file, _holder = instance
    _write(status_file, {"streams": {"1": {"applied": 4}}})
    child = _serve(home, "--file", str(status_file), "--listen", "0")
    try:
        line = child.wait_for("http://", 30)
        found = re.fullmatch(r"ambrosia status: the status page of svc is at "
                             r"http://127\.0\.0\.1:(\d+)/ \(Ctrl-C stops it\)", line)
        assert found, line
        conn = http.client.HTTPConnection("127.0.0.1", int(found.group(1)), timeout=10)
        conn.request("GET", "/status.json")
        doc = json.loads(conn.getresponse().read())
        conn.close()
        assert doc["report"]["streams"] == {"1": {"applied": 4}}
        child.send_signal(signum)
        assert child.wait(10) == 0
        assert child.lines == [line]
    finally:
        child.kill()


def test_serve_refuses_a_bad_address_or_a_taken_port_in_one_line(
        instance: tuple[Path, Path, Child]) -> None:
    home, _status_file, _holder = instance
    for bad, why in (("127.0.0.1:http", "'127.0.0.1:http' is not HOST:PORT (the port is "
                                        "not a number)"),
                     ("70000", "':70000' is not HOST:PORT (the port must be from 0 to "
                               "65535)"),
                     ("localhost", "'localhost' is not [HOST:]PORT")):
        out = subprocess.run([sys.executable, "-m", "ambrosia_cli", "status", "-i", "svc",
                              "--listen", bad], env=dict(os.environ, AMBROSIA_HOME=str(home)),
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert (out.returncode, out.stdout) == (2, "")
        assert out.stderr == f"ambrosia status: error: argument --listen: {why}\n"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        child = _serve(home, "--listen", str(port))
        assert child.wait(30) == 1
        assert child.lines == [f"ambrosia: error: cannot listen on 127.0.0.1:{port}: "
                               "Address already in use"]


def test_the_text_status_shows_the_last_errors_briefly_and_no_history() -> None:
    from ambrosia_cli.status import render

    errors = [{"time": 1_700_000_000 + i, "level": "WARNING", "logger": "ambrosia.p",
               "message": f"warning {i}"} for i in range(7)]
    text = render("p", {"streams": {}, "history": [_sample(1), _sample(2)],
                        "errors": errors}, 1).splitlines()
    at = time.strftime("%H:%M:%S", time.localtime(1_700_000_006))
    assert text[-6:] == ["recent errors (5 of 7, newest last):",
                         *(f"  {time.strftime('%H:%M:%S', time.localtime(1_700_000_000 + i))}"
                           f" WARNING ambrosia.p: warning {i}" for i in range(2, 7))]
    assert text[-1].startswith(f"  {at} ") and not any("history" in line for line in text)
    assert "recent errors" not in render("p", {"streams": {}, "errors": []}, 1)
