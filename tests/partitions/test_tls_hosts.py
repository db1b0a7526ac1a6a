"""TLS between machines: the 2PC file sink on one network namespace (its own address, not
loopback), a client on another. Without TLS the sink refuses to listen there in one line;
with TLS it serves a client holding a certificate of its CA for the address it dialled,
and refuses, in one line each, a plain TCP client and one with a stranger's certificate."""

from __future__ import annotations

import socket
import ssl
import sys
from pathlib import Path

import pytest

from ambrosia_cli.tls import init_dir
from ambrosia_core.processes import Child
from tests.launcher import ROOT

from .conftest import need_network
from .net import Network

pytestmark = pytest.mark.integration

PORT = 7200


def _sink(net: Network, tmp: Path, *args: str) -> Child:
    cmd = [*net.prefix("sink"), sys.executable, "-m",
           "ambrosia_services.connectors.clients.filesink", "--listen",
           f"{net.address('sink')}:{PORT}", "--dir", str(tmp / "sink"), *args]
    return Child.start(cmd, name="ambrosia-sink", cwd=ROOT)


def _client_context(trusts: Path, pki: Path, host: str) -> ssl.SSLContext:
    """A client that trusts ``trusts``'s CA and shows ``pki``'s certificate for ``host``."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(trusts / "ca.pem"))
    ctx.load_cert_chain(pki / f"{host}.pem", pki / f"{host}-key.pem")
    return ctx


def _dial(net: Network, ctx: ssl.SSLContext | None, host: str) -> str:
    """Connect from the client's machine; what happened, in a word or the error."""
    with net.inside("client"):
        raw = socket.create_connection((host, PORT), timeout=10)
    try:
        if ctx is None:
            raw.sendall(b"\0\0\0\x05hello")
            raw.settimeout(5)
            return "closed" if raw.recv(100) == b"" else "answered"
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            tls.settimeout(5)
            tls.do_handshake()
            # TLS 1.3: a refused client certificate shows at the first read.
            tls.sendall(b"\0\0\0\x01\0")
            try:
                return "answered" if tls.recv(100) else "closed"
            except (ssl.SSLError, ConnectionError) as err:
                return f"refused: {err}"
            except TimeoutError:
                return "open"  # a peer it accepted, waiting for a whole frame
    except (ssl.SSLError, ConnectionError) as err:
        return f"refused: {err}"
    finally:
        raw.close()


def test_across_hosts_the_sink_listens_only_with_tls_and_serves_only_its_ca(
        tmp_path: Path) -> None:
    need_network()
    with Network(["sink", "client"]) as net:
        host = net.address("sink")
        ours, stranger = tmp_path / "ours", tmp_path / "stranger"
        init_dir(ours, [host, net.address("client")])
        init_dir(stranger, [net.address("client")])
        # Beyond loopback without TLS: refused in one line, non-zero exit.
        plain = _sink(net, tmp_path)
        code = plain.wait(30)
        assert code != 0
        said = [ln for ln in plain.lines if ln.strip()]
        assert len(said) == 1 and "TLS" in said[0] and "--insecure" in said[0], said
        # With TLS it serves.
        tls = _sink(net, tmp_path, "--tls-cert", str(ours / f"{host}.pem"),
                    "--tls-key", str(ours / f"{host}-key.pem"), "--tls-ca",
                    str(ours / "ca.pem"))
        try:
            tls.wait_for(f"listening on {host}:{PORT}", timeout=30)
            client = net.address("client")
            assert _dial(net, _client_context(ours, ours, client), host) in (
                "open", "closed", "answered")
            assert _dial(net, None, host) == "closed"
            # A stranger who knows our CA's certificate (it is public) but holds none of
            # its certificates.
            refused = _dial(net, _client_context(ours, stranger, client), host)
            assert refused.startswith("refused") or refused == "closed", refused
            # Each refusal is one line of the sink's, naming the peer from the other host.
            tls.wait_for(f"TLS handshake with {client}", timeout=10, count=2)
            lines = [ln for ln in tls.lines if client in ln and "TLS" in ln]
            assert len(lines) >= 2, tls.lines
            assert not any("Traceback" in ln for ln in tls.lines), tls.lines
        finally:
            tls.stop(timeout=10)
