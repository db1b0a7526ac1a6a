"""The TLS options every process takes (``--tls-cert/--tls-key/--tls-ca``, ``--insecure``,
or a configuration's ``[tls]`` table), the contexts they load, and the rule for listening
beyond loopback."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .errors import InsecureListenError, TlsConfigError

if TYPE_CHECKING:
    from .server import Tls

__all__ = ["CONFIG_REMEDY", "ENV_CA", "ENV_CERT", "ENV_KEY", "OPTIONS_REMEDY", "TlsOptions",
           "add_tls_options", "is_loopback", "tls_from_args", "tls_from_config"]

ENV_CERT = "AMBROSIA_TLS_CERT"
ENV_KEY = "AMBROSIA_TLS_KEY"
ENV_CA = "AMBROSIA_TLS_CA"


#: What a refusal to listen beyond loopback without TLS asks for, given options or a
#: configuration's ``[tls]`` table (``TlsOptions.check_listen``).
OPTIONS_REMEDY = ("give --tls-cert, --tls-key and --tls-ca (`ambrosia tls init` makes "
                  "them), or --insecure to accept anyone who reaches the port")
CONFIG_REMEDY = ("give a [tls] table with cert, key and ca (`ambrosia tls init` makes "
                 "them; `ambrosia run --tls-cert/--tls-key/--tls-ca` serve when there is "
                 "no table), or insecure = true in [tls] to accept anyone who reaches the "
                 "port")


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
        from .server import Tls  # asyncio: a command's parser takes these options without it

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
