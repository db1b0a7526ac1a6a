"""``HOST:PORT`` addresses as the command lines and RESTART frames carry them."""

from __future__ import annotations

import attrs

from .errors import AddressError

__all__ = ["Address", "parse_address"]


@attrs.frozen
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str, *, allow_port_zero: bool = False) -> Address:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as an ``Address``.

    Raises:
        AddressError: no port, a port out of range, or an empty host.
    """
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    low = 0 if allow_port_zero else 1
    if not sep or not host or not port.isdigit() or not low <= int(port) <= 65535:
        raise AddressError(f"{text!r} is not HOST:PORT with a port from {low} to 65535")
    return Address(host, int(port))
