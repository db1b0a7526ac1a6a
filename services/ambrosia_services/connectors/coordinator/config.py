"""The coordinator's configuration, read from ``ctx.config`` and checked with one-line
errors. Only ``decision_part()`` reaches the state (through the ``configure`` Impulse);
the rest (addresses, sizes of reads) shapes the primary's I/O only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AddressError, UsageError
from ambrosia_core.tls import Tls, TlsOptions, tls_from_config

from ..frame_reader import DEFAULT_MAX_FRAME_SIZE

__all__ = ["CoordinatorConfig", "CoordinatorConfigError", "at_least", "parse_address"]

_KEYS = ("listen", "advertise", "cookie", "sinks", "interval_bytes", "interval_seconds",
         "max_frame_size", "status_file", "status_seconds", "max_sources", "staging",
         "backlog_bytes", "tls")
# Settings that were keys once and are fixed now (a constructor argument for tests): a
# configuration that still names one is refused, saying why, rather than ignored.
_DROPPED = {
    "credits": "a source's credits are fixed at 1000",
    "batch_messages": "a receive Impulse carries at most 512 MESSAGEs (fixed)",
    "handshake_seconds": "a source's HELLO must come within 10 s (fixed)",
    "segment_bytes": "a staged segment is closed at 64 MiB (fixed)",
}


class CoordinatorConfigError(UsageError):
    """The coordinator's configuration holds a key it does not know or a bad value."""


def parse_address(text: str, what: str) -> Address:
    """``"host:port"`` (``"[v6]:port"`` for IPv6); port 0 is allowed (any free port, when
    listening).

    Raises:
        CoordinatorConfigError: not ``host:port`` with a port in 0..65535.
    """
    try:
        address = Address.parse(text, what=what, allow_port_zero=True)
    except AddressError as err:
        why = f" ({err.detail})" if err.detail else ""
        raise CoordinatorConfigError(f"{what} must be \"host:port\", got {text!r}{why}"
                                     ) from None
    return address


def _address(what: str) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if type(value) is not str:
            raise CoordinatorConfigError(f"{what} must be a \"host:port\" string, got {value!r}")
        parse_address(value, what)
    return check


def at_least(name: str, low: int) -> Any:
    """An attrs validator: ``name`` is an integer (not a bool, not a float) >= ``low``;
    the pipeline's configuration checks its keys with it too."""

    def check(_i: Any, _a: Any, value: Any) -> None:
        if type(value) is not int or value < low:
            raise CoordinatorConfigError(f"{name} must be an integer >= {low}, got {value!r}")
    return check


def _seconds(name: str) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if type(value) not in (int, float) or not value > 0:
            raise CoordinatorConfigError(f"{name} must be a number of seconds > 0, got "
                                         f"{value!r}")
    return check


def _sinks(_i: Any, _a: Any, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise CoordinatorConfigError(f"sinks must be a table of name = \"host:port\", got "
                                     f"{value!r}")
    for name, addr in value.items():
        if not name or len(name.encode()) > 0xFFFF:
            raise CoordinatorConfigError(f"sinks: a sink name must be 1..65535 bytes, got "
                                         f"{name!r}")
        _address(f"sinks.{name}")(None, None, addr)


def _text(name: str) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if type(value) is not str:
            raise CoordinatorConfigError(f"{name} must be a string, got {value!r}")
    return check


def _tls(value: Any) -> TlsOptions:
    """The ``[tls]`` table as ``TlsOptions`` (none: the environment's files, if any)."""
    if isinstance(value, TlsOptions):
        return value
    try:
        return tls_from_config({} if value is None else {"tls": value})
    except UsageError as err:
        raise CoordinatorConfigError(str(err)) from None


@attrs.frozen
class CoordinatorConfig:
    """What the coordinator is told (``--config FILE`` / ``--set KEY=VALUE``).

    Attributes:
        listen: where sources connect ("host:port"; port 0: any free port).
        advertise: the address sent in RESTART when this primary stops ("" = none).
        cookie: the cookie sources and sinks must present ("" = none).
        credits: OK's initial credits for a source (not a key: 1000 MESSAGEs may be
            unanswered, the window bench_connectors measures its throughput with; the
            backlog bound, ``backlog_bytes``, is what holds a source back).
        sinks: sink name -> "host:port" of its 2PC sink server.
        interval_bytes: a transaction is cut when this much output is pending.
        interval_seconds: ... or when pending output is this old.
        max_frame_size: the largest frame accepted from a peer.
        batch_messages: the most MESSAGEs carried by one ``receive`` Impulse (not a key:
            512: half of a source's credits, so a source's window spans two Impulses and
            it is never waiting on one whole log write).
        status_file: a JSON file rewritten with live counters ("" = none; `ambrosia run`
            sets status.json in the instance directory when the configuration names none).
        status_seconds: how often the summary is logged and the status file rewritten.
        handshake_seconds: how long a source may take to send its HELLO, or the rest of
            a frame it began, before it is closed (a connected source may idle between
            frames for as long as it likes). Not a key: a feed sends either in one write,
            so 10 s outlasts any pause of a loaded host.
        max_sources: the most source connections at once; one more is refused.
        staging: the staging root: received messages are written to segment files there
            and only references to them are logged ("" = payloads are logged, for a
            coordinator that keeps them; a pipeline defaults to ``<out>/staging``).
            For runners on other hosts, a path that they and Spark's executors see.
        backlog_bytes: with staging, credits go back to the sources only while the staged
            bytes not yet committed are fewer than this (back-pressure).
        segment_bytes: a staged segment is closed at this size and the next one begun
            (not a key: at 64 MiB a segment's fsync and rename are rare next to its writes,
            and a removed segment frees its space soon enough).
        tls: the ``[tls]`` table (cert, key, ca, insecure; ``ambrosia_core.tls``): the
            source listener, the sink links and the job links speak TLS with it, and
            without it the listener stays on loopback unless ``insecure``.
    """

    listen: str = attrs.field(default="127.0.0.1:7100", validator=_address("listen"))
    advertise: str = attrs.field(default="", validator=_text("advertise"))
    cookie: str = attrs.field(default="", validator=_text("cookie"))
    credits: int = attrs.field(default=1000, validator=at_least("credits", 1))
    sinks: Mapping[str, str] = attrs.field(factory=dict, validator=_sinks,
                                           converter=lambda m: dict(m) if isinstance(
                                               m, Mapping) else m)
    interval_bytes: int = attrs.field(default=64 * 1024, validator=at_least("interval_bytes", 1))
    interval_seconds: float = attrs.field(default=0.5,
                                          validator=_seconds("interval_seconds"))
    max_frame_size: int = attrs.field(default=DEFAULT_MAX_FRAME_SIZE,
                                      validator=at_least("max_frame_size", 64))
    batch_messages: int = attrs.field(default=512, validator=at_least("batch_messages", 1))
    status_file: str = attrs.field(default="", validator=_text("status_file"))
    status_seconds: float = attrs.field(default=5.0, validator=_seconds("status_seconds"))
    handshake_seconds: float = attrs.field(default=10.0,
                                           validator=_seconds("handshake_seconds"))
    max_sources: int = attrs.field(default=256, validator=at_least("max_sources", 1))
    staging: str = attrs.field(default="", validator=_text("staging"))
    backlog_bytes: int = attrs.field(default=256 << 20, validator=at_least("backlog_bytes", 1))
    segment_bytes: int = attrs.field(default=64 << 20, validator=at_least("segment_bytes", 4096))
    tls: TlsOptions = attrs.field(default=None, converter=_tls)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any],
                     other_keys: Sequence[str] = ()) -> CoordinatorConfig:
        """Build from ``ctx.config``, less the keys of a subclass's own.

        Args:
            other_keys: the keys a subclass took out first, named among the known ones
                when an unknown key is refused.

        Raises:
            CoordinatorConfigError: an unknown key, or a bad value (one line naming it).
        """
        dropped = sorted(set(config) & set(_DROPPED))
        if dropped:
            raise CoordinatorConfigError(
                f"{dropped[0]} is no longer a configuration key: {_DROPPED[dropped[0]]}; "
                "remove it")
        unknown = sorted(set(config) - set(_KEYS))
        if unknown:
            raise CoordinatorConfigError(f"unknown configuration key(s) {', '.join(unknown)} "
                                         f"(known: {', '.join((*_KEYS, *other_keys))})")
        return cls(**dict(config))

    @property
    def listen_address(self) -> Address:
        return parse_address(self.listen, "listen")

    def load_tls(self) -> Tls | None:
        """The TLS contexts of ``tls`` (None without TLS).

        Raises:
            CoordinatorConfigError: a file of ``tls`` cannot be used (one line).
        """
        try:
            return self.tls.load()
        except UsageError as err:
            raise CoordinatorConfigError(f"tls: {err}") from None

    def decision_part(self) -> dict[str, Any]:
        """What handlers decide with: the sinks' names and the interval. The state keeps
        the last one it was given (by the ``configure`` Impulse)."""
        return {"sinks": sorted(self.sinks), "interval_bytes": self.interval_bytes,
                "interval_seconds": float(self.interval_seconds)}
