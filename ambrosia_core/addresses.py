"""``HOST:PORT``: where a process listens or what it dials, as command lines, configuration
files and protocol frames write it.

One type so that every process reads and writes an address alike: an IPv6 host goes in
brackets (``[::1]:7000``), since its own colons would leave the port unclear, and
``str()`` gives back text that parses to the same address. Host names are taken as they
are written; only the operating system can say whether one resolves.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable
from typing import Any

import attrs

from ambrosia_core.errors import AddressError

__all__ = ["MAX_PORT", "Address", "address_argument"]

MAX_PORT = 65535


def _check_host(_instance: Any, _attribute: Any, host: Any) -> None:
    if not isinstance(host, str) or not host:
        raise AddressError(f"an address needs a host, got {host!r}")


def _check_port(_instance: Any, _attribute: Any, port: Any) -> None:
    if type(port) is not int or not 0 <= port <= MAX_PORT:
        raise AddressError(f"an address's port must be from 0 to {MAX_PORT}, got {port!r}")


@attrs.frozen
class Address:
    """A host (an IP address or a name, an IPv6 one without brackets) and a port.

    Port 0 stands for "any free port" where a process listens; ``parse`` refuses it
    unless the caller listens.
    """

    host: str = attrs.field(validator=_check_host)
    port: int = attrs.field(validator=_check_port)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, *, what: str = "address", allow_port_zero: bool = False,
              default_host: str | None = None) -> Address:
        """``HOST:PORT`` or ``[IPV6]:PORT`` (surrounding blanks ignored) as an ``Address``.

        Args:
            what: names the value in errors (an option, a configuration key); "" for none.
            allow_port_zero: accept port 0, for a caller that listens on a port the
                operating system chooses.
            default_host: the host of ``:PORT``, which is refused without it.

        Raises:
            AddressError: one line naming ``what`` and the text, and what is wrong: no
                port, a port that is not a number or is out of range, no host, an IPv6
                host without brackets, or brackets around something else.
        """
        def refuse(detail: str = "") -> AddressError:
            said = f"{what} {text!r}" if what else repr(text)
            return AddressError(f"{said} is not HOST:PORT" + (f" ({detail})" if detail else ""),
                                detail)

        stripped = text.strip()
        if stripped.startswith("["):
            close = stripped.find("]")
            if close < 0:
                raise refuse("no ']' closes the IPv6 host")
            host, after = stripped[1:close], stripped[close + 1:]
            if not after:
                raise refuse("no port")
            if not after.startswith(":"):
                raise refuse("the port must follow ']' after a ':'")
            port = after[1:]
            if not host:
                raise refuse("no host")
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise refuse("only an IPv6 address goes in brackets") from None
        else:
            host, sep, port = stripped.rpartition(":")
            if not sep:
                raise refuse()
            if ":" in host:
                raise refuse("an IPv6 host goes in brackets, as in [::1]:7000")
            elif not host:
                if default_host is None:
                    raise refuse("no host")
                host = default_host
            if "[" in host or "]" in host:
                raise refuse("only an IPv6 address goes in brackets, before the ':'")
            if any(c.isspace() for c in host):
                raise refuse("a host has no blanks in it")
        if not port:
            raise refuse("no port")
        if not (port.isascii() and port.isdigit()):
            raise refuse("the port is not a number")
        low = 0 if allow_port_zero else 1
        if not low <= int(port) <= MAX_PORT:
            raise refuse(f"the port must be from {low} to {MAX_PORT}")
        return cls(host, int(port))


def address_argument(*, allow_port_zero: bool = False,
                     default_host: str | None = None) -> Callable[[str], Address]:
    """An argparse ``type=`` that parses ``HOST:PORT`` as ``Address.parse`` does, so that
    argparse's one-line error says what is wrong (argparse already names the option)."""
    def parse(text: str) -> Address:
        try:
            return Address.parse(text, what="", allow_port_zero=allow_port_zero,
                                 default_host=default_host)
        except AddressError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse
