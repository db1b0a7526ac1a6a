"""TLS on the connections that may leave the host: one set of options for every process,
the contexts they make, the rule for listening beyond loopback, and failures in one line.

Every process that listens or dials (a coordinator's links, job runners and the links to
them, the 2PC sinks, the connector coordinator's listener and sink links, the feeds)
takes the same options, parsed here: ``--tls-cert FILE --tls-key FILE --tls-ca FILE``
(defaults ``$AMBROSIA_TLS_CERT``, ``$AMBROSIA_TLS_KEY``, ``$AMBROSIA_TLS_CA``, so a host's
processes can share one setting) and ``--insecure``; an immortal's configuration takes
the same as a ``[tls]`` table (``cert``, ``key``, ``ca``, ``insecure``). ``ambrosia tls
init`` makes a private CA and a certificate per host for users who have none.

With TLS, both ends show a certificate that the other's CA file trusts (mutual): a
listener refuses a peer without one, and a dialler checks that the listener's certificate
names the host it dialled. Without TLS, a process listens on loopback only, unless
``--insecure`` says otherwise (and it logs that it does): a listener beyond loopback
without TLS lets anyone who reaches the port in.

Servers run their end of TLS themselves (``TlsServerProtocol``, on ``ssl.MemoryBIO``),
not through the event loop's ``ssl=``, whose handshake failures asyncio keeps to its debug
log (a refused peer must be named in one line), nor its ``start_tls``, which uvloop does
not serve on the server side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import attrs

from .addresses import Address
from .errors import AmbrosiaError, UsageError

__all__ = ["CONFIG_REMEDY", "ENV_CA", "ENV_CERT", "ENV_KEY", "HANDSHAKE_SECONDS",
           "OPTIONS_REMEDY", "InsecureListenError", "Tls",
           "TlsConfigError", "TlsHandshakeError", "TlsOptions", "TlsServerProtocol",
           "add_tls_options", "describe_tls_error", "is_loopback", "is_tls_record_start",
           "speaks_tls", "tls_client_hello", "tls_from_args", "tls_from_config"]

ENV_CERT = "AMBROSIA_TLS_CERT"
ENV_KEY = "AMBROSIA_TLS_KEY"
ENV_CA = "AMBROSIA_TLS_CA"
HANDSHAKE_SECONDS = 10.0  # a peer that has not finished its handshake by then is dropped


#: What a refusal to listen beyond loopback without TLS asks for, given options or a
#: configuration's ``[tls]`` table (``TlsOptions.check_listen``).
OPTIONS_REMEDY = ("give --tls-cert, --tls-key and --tls-ca (`ambrosia tls init` makes "
                  "them), or --insecure to accept anyone who reaches the port")
CONFIG_REMEDY = ("give a [tls] table with cert, key and ca (`ambrosia tls init` makes "
                 "them; `ambrosia run --tls-cert/--tls-key/--tls-ca` serve when there is "
                 "no table), or insecure = true in [tls] to accept anyone who reaches the "
                 "port")


class TlsConfigError(UsageError):
    """The TLS options cannot be used: one of the three files without the others, a file
    that cannot be read, a key that does not match its certificate."""


class InsecureListenError(UsageError):
    """A process was asked to listen beyond loopback without TLS and without
    ``--insecure``."""


class TlsHandshakeError(AmbrosiaError, ConnectionError):
    """A TLS handshake failed; the message names the peer and why in one line (an
    untrusted, expired or wrong certificate, none at all, or a peer that speaks no TLS)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or a name) is on this host only. A name counts
    when every address it resolves to is loopback; one that does not resolve does not."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback
                               for i in infos)


@attrs.frozen
class TlsOptions:
    """What a process was asked to use: the three files (all or none) and ``--insecure``.

    ``load`` turns them into contexts; ``check_listen`` applies the listening rule.
    """

    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    insecure: bool = False

    def __attrs_post_init__(self) -> None:
        given = {"cert": self.cert, "key": self.key, "ca": self.ca}
        named = [k for k, v in given.items() if v]
        if named and len(named) != 3:
            missing = ", ".join(f"--tls-{k}" for k in given if k not in named)
            raise TlsConfigError(f"TLS needs a certificate, its key and a CA file together "
                                 f"(--tls-cert, --tls-key, --tls-ca; in a [tls] table cert, "
                                 f"key, ca); missing {missing}")

    @property
    def enabled(self) -> bool:
        return bool(self.cert)

    def load(self) -> Tls | None:
        """The contexts for these files, or None without TLS.

        Raises:
            TlsConfigError: a file cannot be read or does not hold what it should.
        """
        if not self.enabled:
            return None
        assert self.cert and self.key and self.ca
        return Tls(_context(ssl.Purpose.CLIENT_AUTH, self.cert, self.key, self.ca),
                   _context(ssl.Purpose.SERVER_AUTH, self.cert, self.key, self.ca))

    def check_listen(self, host: str, what: str, log: Callable[[str], None],
                     remedy: str = OPTIONS_REMEDY) -> None:
        """Apply the rule for listening on ``host``: without TLS only loopback, unless
        ``insecure`` (then ``log`` says so).

        Args:
            remedy: what the refusal tells the user to give: the options
                (``OPTIONS_REMEDY``), or the ``[tls]`` table of a configuration
                (``CONFIG_REMEDY``).

        Raises:
            InsecureListenError: beyond loopback, without TLS or ``--insecure``.
        """
        if self.enabled or is_loopback(host):
            return
        if not self.insecure:
            raise InsecureListenError(
                f"{what} would listen on {host}, beyond loopback, without TLS: {remedy}")
        log(f"{what} listens on {host} without TLS (--insecure): anyone who reaches the "
            "port is let in, and what it carries travels in clear")


def _context(purpose: ssl.Purpose, cert: str, key: str, ca: str) -> ssl.SSLContext:
    """A context that shows ``cert`` and trusts only ``ca``; a server context requires
    the client's certificate too (mutual), a client context checks the host name."""
    ctx = ssl.create_default_context(purpose)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as err:
        raise TlsConfigError(f"--tls-ca {ca}: {_reason(err)}") from None
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise TlsConfigError(f"--tls-cert {cert} with --tls-key {key}: {_reason(err)}"
                             ) from None
    if purpose is ssl.Purpose.CLIENT_AUTH:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _reason(err: OSError | ssl.SSLError) -> str:
    if isinstance(err, ssl.SSLError):
        return {"KEY_VALUES_MISMATCH": "the key does not belong to the certificate",
                "NO_CERTIFICATE_OR_CRL_FOUND": "no certificate in it",
                "PEM_LIB": "not a PEM certificate or key"}.get(
                    str(err.reason), str(err.reason or err))
    return err.strerror or str(err)


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


def _peer(transport: asyncio.BaseTransport) -> str:
    got = transport.get_extra_info("peername")
    if isinstance(got, tuple) and len(got) >= 2:
        return str(Address(str(got[0]), int(got[1])))
    return "a peer"


# OpenSSL's verification results that users meet, in words that say what to fix.
_VERIFY = {
    10: "its certificate has expired",
    9: "its certificate is not valid yet",
    18: "its certificate is self-signed and not in --tls-ca",
    19: "its certificate is not signed by a CA in --tls-ca",
    20: "its certificate is not signed by a CA in --tls-ca",
    21: "its certificate is not signed by a CA in --tls-ca",
    62: "its certificate does not name the host dialled",
}
# Alerts the other end sends when it refused ours.
_ALERTS = {
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the peer refused our certificate: it has expired",
    "TLSV1_ALERT_UNKNOWN_CA": "the peer refused our certificate: its CA is not one the "
                              "peer trusts",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the peer requires a certificate and we sent none",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "the peer sent no certificate",
    "WRONG_VERSION_NUMBER": "the peer does not speak TLS",
    "HTTP_REQUEST": "the peer does not speak TLS",
    "DECRYPTION_FAILED_OR_BAD_RECORD_MAC": "a record failed its integrity check (altered, "
                                           "replayed or cut in transit)",
    "SSLV3_ALERT_BAD_RECORD_MAC": "the peer found a record altered in transit",
    "UNEXPECTED_EOF_WHILE_READING": "the peer closed during the handshake",
}


def describe_tls_error(err: BaseException) -> str:
    """One line for a failed handshake or a broken TLS record, naming the certificate
    problem where OpenSSL says which."""
    if isinstance(err, ssl.SSLCertVerificationError):
        said = _VERIFY.get(err.verify_code)
        if said is None:
            said = f"its certificate was refused: {err.verify_message}"
        return said
    if isinstance(err, ssl.CertificateError):
        return f"its certificate was refused: {err}"
    if isinstance(err, ssl.SSLError):
        reason = str(err.reason or "")
        if reason in _ALERTS:
            return _ALERTS[reason]
        if reason == "CERTIFICATE_VERIFY_FAILED":
            msg = str(err)
            for code, text in _VERIFY.items():
                if _VERIFY_WORDS.get(code, "\0") in msg:
                    return text
            return "its certificate was refused"
        return reason.lower().replace("_", " ") or str(err)
    if isinstance(err, TimeoutError):
        return "no handshake in time"
    if isinstance(err, ConnectionResetError | BrokenPipeError | EOFError):
        return "the peer closed the connection during the handshake (it may refuse our " \
               "certificate or speak no TLS)"
    if isinstance(err, OSError):
        return err.strerror or type(err).__name__
    return str(err) or type(err).__name__


# What OpenSSL's message says for each code, for errors that carry no code.
_VERIFY_WORDS = {10: "certificate has expired", 9: "certificate is not yet valid",
                 18: "self-signed certificate", 19: "self-signed certificate in certificate",
                 20: "unable to get local issuer certificate", 62: "Hostname mismatch"}


def add_tls_options(parser: argparse.ArgumentParser, *, listens: bool = True) -> None:
    """The TLS options every process takes (``tls_from_args`` reads them).

    Args:
        listens: whether the process listens; one that only dials (a feed) takes
            ``--insecure`` too, so that one set of options serves every process, and its
            help says that it changes nothing there.
    """
    g = parser.add_argument_group("TLS (connections that may leave the host)")
    g.add_argument("--tls-cert", metavar="FILE", default=os.environ.get(ENV_CERT) or None,
                   help="this process's certificate, PEM (default $AMBROSIA_TLS_CERT); "
                        "with --tls-key and --tls-ca, every connection is TLS, both ends "
                        "showing a certificate")
    g.add_argument("--tls-key", metavar="FILE", default=os.environ.get(ENV_KEY) or None,
                   help="its private key, PEM (default $AMBROSIA_TLS_KEY)")
    g.add_argument("--tls-ca", metavar="FILE", default=os.environ.get(ENV_CA) or None,
                   help="the CA certificates peers must be signed by, PEM (default "
                        "$AMBROSIA_TLS_CA)")
    g.add_argument("--insecure", action="store_true",
                   help="listen beyond loopback without TLS, letting in anyone who reaches "
                        "the port (logged); without it, such a listener is refused"
                   if listens else
                   "changes nothing here: this process only dials, never listens (without "
                   "--tls-cert/--tls-key/--tls-ca it dials in plain TCP); taken so that "
                   "every process takes the same options")


def tls_from_args(args: argparse.Namespace) -> TlsOptions:
    """The options ``add_tls_options`` added, as ``TlsOptions``.

    Raises:
        TlsConfigError: some of the three files without the others.
    """
    return TlsOptions(args.tls_cert, args.tls_key, args.tls_ca, bool(args.insecure))


def tls_from_config(config: Mapping[str, Any], what: str = "tls") -> TlsOptions:
    """An immortal's ``[tls]`` table (``cert``, ``key``, ``ca``, ``insecure``) as
    ``TlsOptions``; without the table, the environment's files as the options' defaults.

    Raises:
        TlsConfigError: the table has another key or a value of the wrong type, or some
            of the three files without the others.
    """
    table = config.get(what)
    if table is None:
        return TlsOptions(os.environ.get(ENV_CERT) or None, os.environ.get(ENV_KEY) or None,
                          os.environ.get(ENV_CA) or None)
    if not isinstance(table, Mapping):
        raise TlsConfigError(f"{what} must be a table (cert, key, ca, insecure), got "
                             f"{table!r}")
    unknown = sorted(set(table) - {"cert", "key", "ca", "insecure"})
    if unknown:
        raise TlsConfigError(f"{what} has unknown keys {', '.join(unknown)} (it takes "
                             "cert, key, ca, insecure)")
    for key in ("cert", "key", "ca"):
        if key in table and not isinstance(table[key], str):
            raise TlsConfigError(f"{what}.{key} must be a file name, got {table[key]!r}")
    insecure = table.get("insecure", False)
    if not isinstance(insecure, bool):
        raise TlsConfigError(f"{what}.insecure must be true or false, got {insecure!r}")
    return TlsOptions(table.get("cert") or None, table.get("key") or None,
                      table.get("ca") or None, insecure)
