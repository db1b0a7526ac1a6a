"""``raft://HOST:PORT[,HOST:PORT...][?secret=S]``: where an instance's log lives when it
is registered with ``--log-store`` on a ØMQ RAFT cluster."""

from __future__ import annotations

import urllib.parse

import attrs

from ambrosia_ic.errors import RegistryError

__all__ = ["RaftAddress", "parse_address", "without_secret"]

SCHEME = "raft://"


@attrs.frozen
class RaftAddress:
    """The peers' ROUTER urls (any subset: the client learns the rest) and the secret."""

    urls: tuple[str, ...]
    secret: str = ""

    def __str__(self) -> str:
        hosts = ",".join(u.removeprefix("tcp://") for u in self.urls)
        query = "?" + urllib.parse.urlencode({"secret": self.secret}) if self.secret else ""
        return SCHEME + hosts + query


def parse_address(text: str, what: str = "log store") -> RaftAddress:
    """Parse a ``raft://`` address (``what`` names it in errors).

    Raises:
        RegistryError: not of the form above (one line saying what is wrong).
    """
    if not isinstance(text, str) or not text.startswith(SCHEME):
        raise RegistryError(f"{what} {text!r} is not a raft:// address")
    rest = text[len(SCHEME):]
    hosts, _, query = rest.partition("?")
    hosts = hosts.rstrip("/")
    params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=False)
    unknown = set(params) - {"secret"}
    if unknown:
        raise RegistryError(f"{what} {text!r}: unknown parameter {sorted(unknown)[0]!r} "
                            "(only secret is known)")
    urls = []
    for host in hosts.split(","):
        name, sep, port = host.rpartition(":")
        if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise RegistryError(f"{what} {text!r}: {host!r} is not HOST:PORT")
        urls.append(f"tcp://{name}:{int(port)}")
    secret = params.get("secret", [""])[-1]
    return RaftAddress(tuple(urls), secret)


def without_secret(text: str) -> str:
    """An address as messages show it: the cluster's secret left out."""
    return text.split("?", 1)[0]
