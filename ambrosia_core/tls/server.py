"""The loaded contexts (``Tls``): dialling with TLS, and serving it on any event loop
through our own end of TLS (``TlsServerProtocol``, on ``ssl.MemoryBIO``).

Ours rather than the event loop's ``ssl=``, whose handshake failures asyncio keeps to its
debug log (a refused peer must be named in one line), and rather than its ``start_tls``,
which uvloop does not serve on the server side.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, cast

import attrs

from ..addresses import Address
from .errors import TlsHandshakeError, describe_tls_error

__all__ = ["HANDSHAKE_SECONDS", "Handler", "Tls", "TlsServerProtocol"]

HANDSHAKE_SECONDS = 10.0  # a peer that has not finished its handshake by then is dropped


@attrs.frozen(eq=False)
class Tls:
    """The loaded contexts: ``server`` for accepting (mutual), ``client`` for dialling."""

    server: ssl.SSLContext
    client: ssl.SSLContext

    def wrap_server(self, inner: asyncio.Protocol, refused: Callable[[str], None],
                    timeout: float = HANDSHAKE_SECONDS) -> TlsServerProtocol:
        """``inner`` behind the server's end of TLS (see ``TlsServerProtocol``)."""
        return TlsServerProtocol(self.server, inner, refused, timeout)

    async def start_server(self, handler: Handler, host: str | None, port: int,
                           refused: Callable[[str], None],
                           timeout: float = HANDSHAKE_SECONDS, **kwargs: Any
                           ) -> asyncio.Server:
        """``asyncio.start_server`` over TLS, the peer showing a certificate our CA
        trusts: ``handler`` gets the streams once the handshake is done; a peer refused
        or failing is said to ``refused`` in one line, naming the certificate problem.

        Raises:
            OSError: as ``create_server`` (the address is in use, ...).
        """
        loop = asyncio.get_running_loop()

        def factory() -> asyncio.Protocol:
            reader = asyncio.StreamReader(limit=_READ, loop=loop)
            return self.wrap_server(asyncio.StreamReaderProtocol(reader, handler, loop=loop),
                                    refused, timeout)

        return await loop.create_server(factory, host, port, **kwargs)

    async def connect(self, host: str, port: int, timeout: float = HANDSHAKE_SECONDS,
                      **kwargs: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """``asyncio.open_connection`` with TLS, checking that the listener's certificate
        names ``host``.

        Raises:
            TlsHandshakeError: the handshake failed (one line why).
            OSError: the host cannot be reached (as ``open_connection``).
        """
        try:
            return await asyncio.open_connection(
                host, port, ssl=self.client, server_hostname=host,
                ssl_handshake_timeout=timeout, **kwargs)
        except (ssl.SSLError, ssl.CertificateError) as err:
            raise TlsHandshakeError(f"TLS handshake with {Address(host, port)} failed: "
                                    f"{describe_tls_error(err)}") from None
        except ConnectionResetError as err:
            # A listener that refuses our certificate resets during the handshake.
            raise TlsHandshakeError(f"TLS handshake with {Address(host, port)} failed: "
                                    f"{describe_tls_error(err)}") from None


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
_READ = 65536


class _TlsTransport(asyncio.Transport):
    """What the protocol inside a ``TlsServerProtocol`` writes to: plain bytes in,
    TLS records out on the connection."""

    def __init__(self, shim: TlsServerProtocol, raw: asyncio.Transport) -> None:
        super().__init__()
        self._shim = shim
        self._raw = raw

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._shim.send(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        self._shim.close()

    def abort(self) -> None:
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peercert":
            return self._shim.tls.getpeercert()
        if name == "ssl_object":
            return self._shim.tls
        return self._raw.get_extra_info(name, default)


class TlsServerProtocol(asyncio.Protocol):
    """The server's end of TLS on any event loop, around the protocol ``inner``: the
    handshake and the records through ``ssl.MemoryBIO``, ``inner`` told of the
    connection only once the peer's certificate checked.

    Ours rather than the loop's: asyncio keeps a failed handshake to its debug log, and
    uvloop's ``start_tls`` does not serve the server side; a refused peer must be named
    (``refused`` gets one line). A record that fails its check (altered, replayed, cut)
    closes the connection, and ``inner.connection_lost`` gets the ``ssl.SSLError``.
    """

    def __init__(self, ctx: ssl.SSLContext, inner: asyncio.Protocol,
                 refused: Callable[[str], None], timeout: float = HANDSHAKE_SECONDS) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.inner = inner
        self.refused = refused
        self.timeout = timeout
        self.raw: asyncio.Transport | None = None
        self.peer = "a peer"
        self.secure = False
        self.error: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = cast(asyncio.Transport, transport)
        self.peer = _peer(transport)
        self._timer = asyncio.get_running_loop().call_later(
            self.timeout, self._fail, TimeoutError())

    def _flush(self) -> None:
        out = self._outgoing.read()
        if out and self.raw is not None and not self.raw.is_closing():
            self.raw.write(out)

    def _fail(self, err: BaseException) -> None:
        self._flush()  # the alert, if any, tells the peer why
        if self.raw is not None:
            self.raw.close()
        if not self.secure:
            if self.error is None:
                self.error = err
                self.refused(f"TLS handshake with {self.peer} failed: "
                             f"{describe_tls_error(err)}")
        elif self.error is None:
            self.error = err

    def data_received(self, data: bytes) -> None:
        if self.error is not None:
            return
        self._incoming.write(data)
        if not self.secure:
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                return
            except (ssl.SSLError, ssl.CertificateError) as err:
                self._fail(err)
                return
            self.secure = True
            if self._timer is not None:
                self._timer.cancel()
            self._flush()
            assert self.raw is not None
            self.inner.connection_made(_TlsTransport(self, self.raw))
        while self.error is None:
            try:
                chunk = self.tls.read(_READ)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the peer's close_notify
                self._flush()
                if self.raw is not None:
                    self.raw.close()
                break
            except ssl.SSLError as err:
                self._fail(err)
                break
            if not chunk:
                break
            self.inner.data_received(chunk)
        self._flush()

    def send(self, data: bytes) -> None:
        if self.error is not None or self.raw is None or self.raw.is_closing():
            return
        self.tls.write(data)
        self._flush()

    def close(self) -> None:
        if self.raw is None or self.raw.is_closing():
            return
        with contextlib.suppress(ssl.SSLError):
            self.tls.unwrap()  # close_notify
        self._flush()
        self.raw.close()

    def eof_received(self) -> bool | None:
        return False

    def pause_writing(self) -> None:
        if self.secure:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.secure:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.secure:
            err = self.error if isinstance(self.error, Exception) else exc
            self.inner.connection_lost(err)
        elif self.error is None:
            self.error = exc or ConnectionResetError()
            self.refused(f"TLS handshake with {self.peer} failed: "
                         f"{describe_tls_error(self.error)}")


def _peer(transport: asyncio.BaseTransport) -> str:
    got = transport.get_extra_info("peername")
    if isinstance(got, tuple) and len(got) >= 2:
        return str(Address(str(got[0]), int(got[1])))
    return "a peer"
