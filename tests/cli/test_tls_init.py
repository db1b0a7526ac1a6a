"""``ambrosia tls init`` end to end: the files it writes serve a sink over TLS, a second
run keeps the CA and adds a host, and its key files are readable by their owner only."""

from __future__ import annotations

import datetime
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ambrosia_cli.tls import HOST_DAYS, RENEW_DAYS, TlsInitError, _ends, init_dir, issue_host
from ambrosia_core.tls import TlsOptions

from ..services.connectors.clients.helpers import SinkClient, SinkProcess

ROOT = Path(__file__).resolve().parents[2]


def _init(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", "tls", "init", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_tls_init_makes_files_that_serve_a_sink_over_tls(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    r = _init(str(pki), "--hosts", "127.0.0.1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"wrote {pki / '.gitignore'}: git ignores the private keys (*-key.pem) here",
        f"made the CA {pki / 'ca.pem'} (its key ca-key.pem signs: keep it off the hosts)",
        f"made 127.0.0.1: --tls-cert {pki / '127.0.0.1.pem'} --tls-key "
        f"{pki / '127.0.0.1-key.pem'} --tls-ca {pki / 'ca.pem'}"]
    for key in ("ca-key.pem", "127.0.0.1-key.pem"):
        assert stat.S_IMODE(os.stat(pki / key).st_mode) == 0o600
    ca = (pki / "ca.pem").read_bytes()
    ends = _ends(pki / "127.0.0.1.pem")
    r = _init(str(pki), "--hosts", "127.0.0.1,node-b.example")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == [
        f"kept the CA {pki / 'ca.pem'}",
        f"kept 127.0.0.1: {pki / '127.0.0.1.pem'} (valid until {ends:%Y-%m-%d}; a run "
        f"within {RENEW_DAYS} days of that renews it)"]
    assert (pki / "ca.pem").read_bytes() == ca and (pki / "node-b.example.pem").exists()

    args = ["--tls-cert", str(pki / "127.0.0.1.pem"), "--tls-key",
            str(pki / "127.0.0.1-key.pem"), "--tls-ca", str(pki / "ca.pem")]
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log", extra=args)
    try:
        tls = TlsOptions(args[1], args[3], args[5]).load()
        assert tls is not None
        assert f"listening on 127.0.0.1:{sink.port} over TLS (directory " in (
            tmp_path / "sink.log").read_text()
        client = SinkClient(sink.port, tls=tls.client)
        client.handshake()
        assert client.list_uncommitted() == ()
        client.close()
    finally:
        sink.kill()


def test_tls_init_refuses_a_host_that_is_no_host_in_one_line(tmp_path: Path) -> None:
    r = _init(str(tmp_path / "pki"), "--hosts", "bad host!")
    assert r.returncode == 1
    assert r.stderr == "ambrosia: error: 'bad host!' is neither an IP address nor a host name\n"


def test_tls_init_in_a_repository_leaves_no_private_key_for_git_to_take(
        tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    r = _init(str(tmp_path / "pki"), "--hosts", "127.0.0.1")
    assert r.returncode == 0, r.stderr
    untracked = subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain",
                                "--untracked-files=all"], capture_output=True, text=True,
                               check=True).stdout.split()
    assert "pki/ca.pem" in untracked and "pki/127.0.0.1.pem" in untracked
    assert not [f for f in untracked if f.endswith("-key.pem")], untracked
    # A .gitignore of the user's own is kept as it is.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / ".gitignore").write_text("*.pem\n")
    assert _init(str(tmp_path / "mine")).returncode == 0
    assert (tmp_path / "mine" / ".gitignore").read_text() == "*.pem\n"


def test_a_run_renews_a_host_certificate_near_its_end_and_keeps_the_others(
        tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    init_dir(pki, ["127.0.0.1", "node-b"])
    now = datetime.datetime.now(datetime.UTC)
    # node-b's ends in RENEW_DAYS + 1 days, 127.0.0.1's in RENEW_DAYS - 1.
    for host, left in (("node-b", RENEW_DAYS + 1), ("127.0.0.1", RENEW_DAYS - 1)):
        issue_host(pki, host, not_before=now - datetime.timedelta(days=HOST_DAYS - left))
    kept, renewed = (pki / "node-b.pem").read_bytes(), (pki / "127.0.0.1.pem").read_bytes()
    lines = init_dir(pki, ["127.0.0.1", "node-b"], now=now)
    assert lines[1].startswith(f"made 127.0.0.1: --tls-cert {pki / '127.0.0.1.pem'}")
    assert lines[2].startswith(f"kept node-b: {pki / 'node-b.pem'} (valid until ")
    assert (pki / "node-b.pem").read_bytes() == kept
    assert (pki / "127.0.0.1.pem").read_bytes() != renewed
    ends = _ends(pki / "127.0.0.1.pem")
    assert ends is not None and ends - now > datetime.timedelta(days=HOST_DAYS - 1)
    # A file in a host's place that is no certificate is refused, not replaced.
    (pki / "node-b.pem").write_text("not a certificate")
    with pytest.raises(TlsInitError) as refused:
        init_dir(pki, ["node-b"])
    assert str(refused.value) == (f"{pki / 'node-b.pem'} is not a PEM certificate (delete "
                                  "it and its key to make new ones)")
