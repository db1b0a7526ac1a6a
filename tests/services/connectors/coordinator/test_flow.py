"""The coordinator as a real process: a scripted source over a socket, a scripted 2PC
sink in this process, the coordinator killed with -9 and restarted."""

from __future__ import annotations

from pathlib import Path

import pytest

from ambrosia_py.runtime.cli import free_ports
from ambrosia_py.testing import ImmortalProcess
from tests.launcher import Launcher, wait_until

from .peers import FROM_START, MemorySink, Source, lines

pytestmark = pytest.mark.integration

TARGET = "services.connectors:ConnectorCoordinator"


def start(launcher: Launcher, tmp_path: Path, sink: MemorySink, port: int,
          name: str = "coord", **extra: object) -> ImmortalProcess:
    cfg = tmp_path / "coord.toml"
    if not cfg.exists():
        cfg.write_text(f'listen = "127.0.0.1:{port}"\ninterval_bytes = 200\n'
                       f'interval_seconds = 0.2\nstatus_seconds = 0.5\n'
                       f'status_file = "{tmp_path / "status.json"}"\n'
                       f'[sinks]\nout = "127.0.0.1:{sink.port}"\n')
    args = ["--config", str(cfg)]
    for k, v in extra.items():
        args += ["--set", f"{k}={v}"]
    p = launcher.start(TARGET, name, args=args)
    p.wait_for("listening for sources")
    return p


def expected(sid: int, n: int) -> bytes:
    return b"".join(m.payload for m in lines(sid, range(1, n + 1)))


def test_lines_are_committed_once_in_order_and_acked_after_apply(
        launcher: Launcher, tmp_path: Path) -> None:
    sink = MemorySink()
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port)
    src = Source(port)
    src.hello()
    assert src.notify(5, "five").point_of_reference == FROM_START
    src.send(*lines(5, range(1, 101)))
    src.wait_acked(5, 100)
    src.close()
    p.kill()  # ACKed means logged: all 100 are there after a kill -9
    p = start(launcher, tmp_path, sink, port)
    src = Source(port)
    src.hello()
    assert src.notify(5, "five").point_of_reference == 100
    src.send(*lines(5, range(100, 121)))  # 100 again: a re-send, dropped
    src.wait_acked(5, 120)
    wait_until(lambda: sink.committed_bytes == expected(5, 120), 30)
    assert not sink.violations
    p.stop()
    assert src.next().__class__.__name__ in ("Restart", "ConnectionClosed")
    assert src.restart is not None
