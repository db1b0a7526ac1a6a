"""Link addresses: the host a coordinator's link server binds, and the host it advertises
(what coordinators on other machines dial, and what its epoch claims name).

The two differ when a coordinator binds every address (``0.0.0.0`` or ``::``): nobody can
dial a wildcard, so such a registration must say which of the machine's names to use.
The binding's receive and send ports are not links: they stay on 127.0.0.1 always.
"""

from __future__ import annotations

import ipaddress
import re

from ambrosia_core.addresses import Address
from ambrosia_ic.errors import RegistryError

__all__ = ["LOOPBACK", "check_host", "format_address", "is_wildcard", "link_hosts"]

LOOPBACK = "127.0.0.1"
# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_wildcard(host: str) -> bool:
    """Whether ``host`` means "every address of this machine" (0.0.0.0, ::)."""
    ip = _ip(host)
    return ip is not None and ip.is_unspecified


def check_host(what: str, host: str) -> str:
    """``host`` if it is an IP address or a host name.

    Raises:
        RegistryError: it is neither (one line naming ``what``).
    """
    if isinstance(host, str) and host and len(host) <= 253 and (
            _ip(host) is not None or _HOSTNAME.match(host)):
        return host
    raise RegistryError(f"{what} {host!r} is not an IP address or a host name")


def link_hosts(bind: str | None, advertise: str | None) -> tuple[str, str]:
    """The (bind host, advertised host) pair that ``--ic-host`` and ``--advertise`` ask
    for: no bind host binds 127.0.0.1, no advertised host advertises the bind host.

    Raises:
        RegistryError: a host is malformed, a wildcard bind host has no advertised host,
            or the advertised host is itself a wildcard.
    """
    host = check_host("ic host", bind or LOOPBACK)
    if not advertise:
        if is_wildcard(host):
            raise RegistryError(
                f"ic host {host} listens on every address, so others need to be told which "
                "one to dial: give --advertise HOST too")
        return host, host
    check_host("advertised host", advertise)
    if is_wildcard(advertise):
        raise RegistryError(f"advertised host {advertise} is not an address anyone can dial: "
                            "name this machine (an IP address or a host name)")
    return host, advertise


def format_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    return str(Address(host, port))
