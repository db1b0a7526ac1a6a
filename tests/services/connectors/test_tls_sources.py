"""The connector pipeline across hosts, over TLS: a feed (`ambrosia-feed` with the TLS
options) sends a file through the connector coordinator's source listener (its `[tls]`
table) to the 2PC file sink (TLS options too), every hop mutually authenticated; a feed
with a stranger's certificate is refused in one line, one without TLS stops in one line,
and neither sends anything."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess
from tests.launcher import ROOT, Launcher, wait_until
from tests.pki import make_pki

from .clients.helpers import SinkProcess

pytestmark = pytest.mark.integration

TARGET = "ambrosia_services.connectors:ConnectorCoordinator"
LINES = [f"tls {i:05d} {'y' * (i % 17)}\n".encode() for i in range(3000)]


FEED = "ambrosia_services.connectors.clients.feed"


def _feed(tmp: Path, port: int, name: str, args: list[str]) -> tuple[subprocess.Popen[bytes],
                                                                     Path]:
    log = tmp / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.services.tuned", FEED, f"{FEED}.BACKOFF_CAP=0.05",
             "--", "--connect", f"127.0.0.1:{port}", "--instance-name", name,
             "--once", "data.log", *args],
            cwd=tmp, stdout=out, stderr=out,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    return proc, log


def _refusals(coord: ImmortalProcess) -> int:
    return sum("refused a source" in ln for ln in coord.lines)


def _refused_after(coord: ImmortalProcess, before: int) -> bool:
    return _refusals(coord) > before


def test_a_feed_reaches_the_sink_over_tls_and_strangers_are_refused(
        launcher: Launcher, tmp_path: Path) -> None:
    ours, stranger, _expired = make_pki(tmp_path / "pki")
    (tmp_path / "data.log").write_bytes(b"".join(LINES))
    port, sink_port = free_ports(2)
    cert, key = ours.cert()
    sink = SinkProcess(tmp_path / "sink", tmp_path / "sink.log", port=sink_port,
                       extra=ours.args())
    (tmp_path / "coord.toml").write_text(
        f'listen = "127.0.0.1:{port}"\ninterval_seconds = 0.05\n'
        f'[tls]\ncert = "{cert}"\nkey = "{key}"\nca = "{ours.ca}"\n'
        f'[sinks]\nout = "127.0.0.1:{sink_port}"\n')
    coord = launcher.start(TARGET, "coord", args=["--config", str(tmp_path / "coord.toml")])
    procs = []
    try:
        said = coord.wait_for("listening for sources")
        assert said.endswith(f"listening for sources on 127.0.0.1:{port} over TLS"), said
        # Strangers first: one speaking plain TCP, one with another CA's certificate.
        # The plain feed learns that the listener speaks TLS (its probe is refused too)
        # and stops in one line.
        proc, log = _feed(tmp_path, port, "plain", [])
        procs.append(proc)
        assert proc.wait(30) == 1, log.read_text()
        assert f"the worker at 127.0.0.1:{port} speaks TLS" in log.read_text()
        # The stranger's handshake fails, and it tries again: waited for by its own
        # refusal, then the coordinator's.
        before = _refusals(coord)
        proc, log = _feed(tmp_path, port, "stranger", stranger.args())
        procs.append(proc)
        wait_until(lambda: "TLS handshake" in log.read_text(), "the stranger's refusal", 30)
        wait_until(partial(_refused_after, coord, before), "the coordinator's refusal", 30)
        proc.kill()
        proc.wait()
        committed = tmp_path / "sink" / "committed"
        assert not committed.exists() or committed.read_bytes() == b""  # nothing came in
        refused = [ln for ln in coord.lines if "refused a source" in ln]
        assert len(refused) >= 2 and all("Traceback" not in ln for ln in coord.lines), refused
        # Then the feed of ours: every line committed once, in order.
        proc, log = _feed(tmp_path, port, "ours", ours.args())
        procs.append(proc)
        wait_until(lambda: committed.exists() and committed.read_bytes() == b"".join(LINES),
                   "every line committed", 60)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        sink.kill()
