"""``ambrosia run`` refuses what it cannot run with before it writes anything: a
configuration the class refuses (an unknown key, a value of the wrong type, a listener
beyond loopback without TLS), TLS files it cannot use, and metrics ports in use. Each
refusal is one line and exit code 1, and the home is left exactly as it was, for a new
instance (no registration, no directories, no class record) and for one that has run
(its registration, records, checkpoints and logs untouched)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ambrosia_py.testing import start_immortal
from tests.launcher import ROOT

pytestmark = pytest.mark.integration

CONNECTORS = "ambrosia_services.connectors:ConnectorCoordinator"


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMBROSIA_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", CONNECTORS, "-i", "cc",
                           *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def taken() -> Iterator[int]:
    """A port another socket listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose instance ``cc`` has run once (registered, with a checkpoint)."""
    home = tmp_path_factory.mktemp("ran") / "home"
    p = start_immortal(CONNECTORS, "cc", home=home, cwd=ROOT)
    try:
        assert p.stop() == 0, p.lines[-5:]
    finally:
        p.kill()
    assert any(name.startswith("serverchkpt") for name in os.listdir(home / "logs" / "cc_0"))
    return home


REFUSALS = [
    (["--set", "lisen=127.0.0.1:0"], "unknown configuration key(s) lisen (known: listen, "),
    (["--set", 'max_sources="5"'], "max_sources must be an integer >= 1, got '5'"),
    (["--set", "credits=5"], "credits is no longer a configuration key: a source's credits "
                             "are fixed at 1000; remove it"),
    (["--set", "listen=0.0.0.0:0"], "listen: the source listener would listen on 0.0.0.0, "
                                    "beyond loopback, without TLS: give a [tls] table"),
    (["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem", "--tls-ca",
      "/nonexistent/ca.pem"], "/nonexistent/"),
    (["--metrics", "{taken}"], "--metrics 127.0.0.1:{taken}: cannot serve metrics there: "
                               "Address already in use"),
    (["--coordinator-metrics", "{taken}"], "--coordinator-metrics 127.0.0.1:{taken}: cannot "
                                           "serve metrics there: Address already in use"),
]


@pytest.mark.parametrize(("args", "said"), REFUSALS, ids=[
    "unknown-key", "wrong-type", "dropped-key", "beyond-loopback", "tls-files", "metrics",
    "coordinator-metrics"])
@pytest.mark.parametrize("home_kind", ["new", "ran"])
def test_a_refusal_is_one_line_and_writes_nothing(
        args: list[str], said: str, home_kind: str, taken: int, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    home = tmp_path / "home" if home_kind == "new" else request.getfixturevalue("ran")
    before = snapshot(home)
    done = run(home, *[a.format(taken=taken) for a in args])
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("ambrosia run: error: ") and said.format(taken=taken) in line, line
    assert snapshot(home) == before
