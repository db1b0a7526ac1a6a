"""The sinks refuse what they cannot serve with before they open their store: listening
beyond loopback without TLS, TLS files they cannot use, a metrics port or a listening
port in use. Each is one line and exit code 1, and nothing is created: not the file
sink's ``--dir``, not the PostgreSQL sink's tables (its database is never dialled)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import ROOT

FILE_SINK = "ambrosia_services.connectors.clients.filesink"
PG_SINK = "ambrosia_services.connectors.clients.pgsink"


@pytest.fixture(scope="module")
def taken() -> Iterator[int]:
    """A port another socket listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


REFUSALS = [
    (["--listen", "0.0.0.0:0"], "the sink would listen on 0.0.0.0, beyond loopback, "
                                "without TLS"),
    (["--listen", "127.0.0.1:0", "--tls-cert", "/no-such-tls/c.pem", "--tls-key",
      "/no-such-tls/k.pem", "--tls-ca", "/no-such-tls/ca.pem"], "/no-such-tls/"),
    (["--listen", "127.0.0.1:0", "--metrics", "{taken}"],
     "--metrics 127.0.0.1:{taken}: cannot serve metrics there: Address already in use"),
    (["--listen", "127.0.0.1:{taken}"],
     "--listen 127.0.0.1:{taken}: cannot listen there: Address already in use"),
]
IDS = ["beyond-loopback", "tls-files", "metrics", "listen"]


def _run(module: str, args: list[str], taken: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *[a.format(taken=taken) for a in args]],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "said"), REFUSALS, ids=IDS)
def test_the_file_sink_refuses_before_it_creates_its_directory(
        args: list[str], said: str, taken: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _run(FILE_SINK, [*args, "--dir", str(out)], taken)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("ambrosia-sink: ") and said.format(taken=taken) in line, line
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "said"), REFUSALS, ids=IDS)
def test_the_postgres_sink_refuses_before_it_dials_its_database(
        args: list[str], said: str, taken: int) -> None:
    pytest.importorskip("psycopg")
    # A database that does not exist: reaching it would be a different line.
    dsn = "host=/nonexistent/socket-dir dbname=none connect_timeout=1"
    done = _run(PG_SINK, [*args, "--dsn", dsn, "--table", "out"], taken)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("ambrosia-pgsink: ") and said.format(taken=taken) in line, line
