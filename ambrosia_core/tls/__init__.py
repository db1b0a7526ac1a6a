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

The pieces: ``options`` (the options, the contexts they load, the listening rule),
``server`` (``Tls``: dialling, and the server's end of TLS run by ourselves on
``ssl.MemoryBIO``), ``probe`` (whether a listener speaks TLS) and ``errors`` (each
failure in one line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import InsecureListenError, TlsConfigError, TlsHandshakeError, describe_tls_error
from .options import (
    CONFIG_REMEDY,
    ENV_CA,
    ENV_CERT,
    ENV_KEY,
    OPTIONS_REMEDY,
    TlsOptions,
    add_tls_options,
    is_loopback,
    tls_from_args,
    tls_from_config,
)

if TYPE_CHECKING:
    from .probe import is_tls_record_start, speaks_tls, tls_client_hello
    from .server import HANDSHAKE_SECONDS, Tls, TlsServerProtocol

# The connection side (asyncio, and the probe built on it) is imported when first named:
# every command's parser takes the options, and most commands never open a connection.
_LAZY = {"HANDSHAKE_SECONDS": "server", "Tls": "server", "TlsServerProtocol": "server",
         "is_tls_record_start": "probe", "speaks_tls": "probe", "tls_client_hello": "probe"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value

__all__ = ["CONFIG_REMEDY", "ENV_CA", "ENV_CERT", "ENV_KEY", "HANDSHAKE_SECONDS",
           "OPTIONS_REMEDY", "InsecureListenError", "Tls",
           "TlsConfigError", "TlsHandshakeError", "TlsOptions", "TlsServerProtocol",
           "add_tls_options", "describe_tls_error", "is_loopback", "is_tls_record_start",
           "speaks_tls", "tls_client_hello", "tls_from_args", "tls_from_config"]
