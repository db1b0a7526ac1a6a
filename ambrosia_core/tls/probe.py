"""Whether a listener speaks TLS: the first bytes of a TLS record, and a ClientHello
sent to learn it from a listener that closed a plain client unanswered."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from .server import HANDSHAKE_SECONDS

__all__ = ["is_tls_record_start", "speaks_tls", "tls_client_hello"]


def tls_client_hello() -> bytes:
    """The bytes of a TLS ClientHello (any version we speak, no certificate checks): what
    ``speaks_tls`` sends to learn whether a listener answers in TLS."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    out = ssl.MemoryBIO()
    tls = ctx.wrap_bio(ssl.MemoryBIO(), out, server_side=False)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return out.read()


def is_tls_record_start(data: bytes) -> bool | None:
    """Whether ``data``, the first bytes a peer sent, begin a TLS record: a content type
    of 20 to 24 (change cipher spec, alert, handshake, application data, heartbeat) and
    major version 3 (SSL 3.0 and every TLS). None while fewer than two bytes came."""
    if len(data) < 2:
        return None
    return 20 <= data[0] <= 24 and data[1] == 3


async def speaks_tls(host: str, port: int, timeout: float = HANDSHAKE_SECONDS) -> bool | None:
    """Whether the listener at ``host:port`` answers a TLS ClientHello in TLS.

    For a client that spoke plain TCP and was closed unanswered: a TLS listener closes so,
    without a byte, when the first bytes it reads are not TLS (OpenSSL sends no alert
    then), and so does a plain listener that is stopping. This asks once more, in TLS:
    a TLS listener answers with a handshake record (or an alert), which a plain
    listener's own protocol never begins with (the connector and job protocols begin
    with a small length or a magic string). None when no answer came (the connection
    was refused, closed unanswered again, or ``timeout`` passed): nothing learnt.
    """
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(tls_client_hello())
        got = b""
        async with asyncio.timeout(timeout):
            while (answer := is_tls_record_start(got)) is None:
                more = await reader.read(2 - len(got))
                if not more:
                    return None
                got += more
        return answer
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
