"""Certificates for the TLS tests, made by ``ambrosia tls init``'s own code: a CA with a
certificate for 127.0.0.1, a second CA (a stranger's), and an expired certificate signed
by the first CA."""

from __future__ import annotations

import datetime
from pathlib import Path

import attrs

from ambrosia_cli.tls import init_dir, issue_host
from ambrosia_core.tls import Tls, TlsOptions

HOST = "127.0.0.1"


@attrs.frozen
class Pki:
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    def cert(self, host: str = HOST) -> tuple[Path, Path]:
        return self.dir / f"{host}.pem", self.dir / f"{host}-key.pem"

    def args(self, host: str = HOST) -> list[str]:
        """The command-line options of a process on ``host``."""
        cert, key = self.cert(host)
        return ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(self.ca)]

    def options(self, host: str = HOST) -> TlsOptions:
        cert, key = self.cert(host)
        return TlsOptions(str(cert), str(key), str(self.ca))

    def tls(self, host: str = HOST) -> Tls:
        tls = self.options(host).load()
        assert tls is not None
        return tls


def make_pki(root: Path) -> tuple[Pki, Pki, Pki]:
    """``(ours, stranger, expired)``: ``expired`` shares ``ours``'s CA, its certificate
    for 127.0.0.1 ran out a day ago."""
    ours, stranger, expired = Pki(root / "ours"), Pki(root / "stranger"), Pki(root / "expired")
    init_dir(ours.dir, [HOST])
    init_dir(stranger.dir, [HOST])
    expired.dir.mkdir()
    for name in ("ca.pem", "ca-key.pem"):
        (expired.dir / name).write_bytes((ours.dir / name).read_bytes())
    issue_host(expired.dir, HOST, days=10,
               not_before=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=11))
    return ours, stranger, expired
