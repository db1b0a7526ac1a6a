"""``raft://HOST:PORT[,HOST:PORT...][?secret=S]``: where an instance's log lives when it
is registered with ``--log-store`` on a ØMQ RAFT cluster."""

from __future__ import annotations

import urllib.parse

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AddressError
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
    for peer in hosts.split(","):
        try:
            urls.append(f"tcp://{Address.parse(peer, what='')}")
        except AddressError as err:
            raise RegistryError(f"{what} {text!r}: {err}") from None
    secret = params.get("secret", [""])[-1]
    return RaftAddress(tuple(urls), secret)


def without_secret(text: str) -> str:
    """An address as messages show it: the cluster's secret left out."""
    return text.split("?", 1)[0]
