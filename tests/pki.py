"""For the TLS tests: certificates made by ``ambrosia tls init``'s own code (a CA with a
certificate for 127.0.0.1, a second CA, a stranger's, and an expired certificate signed by
the first CA), and a relay that alters or replays a TLS record in flight."""

from __future__ import annotations

import asyncio
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


class Relay:
    """Passes bytes between a client and ``target``; once ``arm`` is called, the next
    TLS record the client sends is altered (``flip``) or sent twice (``replay``)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.mode = "pass"
        self.done = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def arm(self, mode: str) -> None:
        self.mode = mode

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.target)

        async def back() -> None:
            while data := await sr.read(65536):
                cw.write(data)
            cw.close()

        task = asyncio.ensure_future(back())
        try:
            while True:
                head = await cr.readexactly(5)  # a TLS record: type, version, length
                body = await cr.readexactly(int.from_bytes(head[3:5]))
                if self.mode == "flip" and head[0] == 23:
                    body = body[:-1] + bytes([body[-1] ^ 1])
                    self.mode = "pass"
                    self.done.set()
                elif self.mode == "replay" and head[0] == 23:
                    sw.write(head + body)
                    self.mode = "pass"
                    self.done.set()
                sw.write(head + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            sw.close()
            task.cancel()
