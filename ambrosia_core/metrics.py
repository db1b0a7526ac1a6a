"""Metrics in the Prometheus exposition format, served on request by any long-running
process (``--metrics [HOST:]PORT``): the option, a histogram cheap enough for a commit
path, and the exposition server (prometheus_client's own).

Nothing here counts. Each process already keeps the counters it needs (records written,
inputs applied, commits); a *source* reads them when a scrape comes and writes what it
read into ``Families``. So the hot paths pay nothing for metrics, and nothing about
metrics can reach an immortal's state or its log. The only additions on those paths are
plain integer counts and, for rare events (a log sync, a checkpoint, a commit, a job),
``Histogram.observe``: a bisect over a dozen bounds and three additions, no lock.

Sources run on the exposition server's threads, beside the event loop that changes what
they read: they read integers as they are, and copy a dict or list (``dict(d)``,
``list(d.values())``: one step under the interpreter's lock) before iterating it.

prometheus_client is imported only once a process is asked to serve metrics (``serve``),
so a process that serves none never loads it.
"""

from __future__ import annotations

import argparse
import bisect
import errno
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AddressError, UsageError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["DEFAULT_HOST", "DURATION_BUCKETS", "SIZE_BUCKETS", "Families", "Histogram",
           "MetricsError", "MetricsServer", "Source", "add_metrics_option", "check_address",
           "metrics_address", "metrics_argument", "serve"]

#: Where metrics are served when the option names only a port: this machine only.
DEFAULT_HOST = "127.0.0.1"
#: Seconds: from a 50 us fsync to a minute-long checkpoint or job.
DURATION_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Bytes: from a 1 KiB checkpoint to a 4 GiB one.
SIZE_BUCKETS: tuple[float, ...] = tuple(float(1 << k) for k in range(10, 33, 2))


class MetricsError(UsageError):
    """The metrics cannot be served at the address given (in use, not this machine's,
    a name that does not resolve). The message names the option and the address."""


# ------------------------------------------------------------------ the option


def metrics_address(text: str, *, what: str = "--metrics") -> Address:
    """``[HOST:]PORT`` as an address: a bare port (``9464``) or ``:PORT`` is on
    ``DEFAULT_HOST``; an IPv6 host goes in brackets.

    Raises:
        AddressError: not ``[HOST:]PORT``, or a port outside 1..65535 (one line naming
            ``what`` and the text).
    """
    stripped = text.strip()
    if stripped.isascii() and stripped.isdigit():
        stripped = f":{stripped}"
    try:
        return Address.parse(stripped, what="", default_host=DEFAULT_HOST)
    except AddressError as err:
        said = f"{what} {text!r}" if what else repr(text)
        raise AddressError(f"{said} is not [HOST:]PORT" +
                           (f" ({err.detail})" if err.detail else ""), err.detail) from None


def metrics_argument() -> Callable[[str], Address]:
    """An argparse ``type=`` for ``[HOST:]PORT`` (argparse names the option itself)."""
    def parse(text: str) -> Address:
        try:
            return metrics_address(text, what="")
        except AddressError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def add_metrics_option(parser: argparse.ArgumentParser, flag: str = "--metrics", *,
                       what: str = "this process's", note: str = "") -> None:
    """The option every process shares: off unless given.

    Args:
        what: whose metrics, as a possessive ("the sink's"): "serve {what} metrics".
        note: a last word on whose they are, added to the help.
    """
    parser.add_argument(
        flag, type=metrics_argument(), default=None, metavar="[HOST:]PORT",
        help=f"serve {what} metrics in the Prometheus exposition format at "
             f"http://HOST:PORT/metrics (HOST defaults to {DEFAULT_HOST}; default: none)"
             + (f"; {note}" if note else ""))


# ------------------------------------------------------------------ counting


class Histogram:
    """Observations counted into fixed buckets, read by a source at scrape time.

    Not locked: ``observe`` is called from one thread (the event loop's), and a scrape
    that reads it meanwhile may miss the observation being added, never see a torn
    count (the total it exports is the sum of its buckets).
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float] = DURATION_BUCKETS) -> None:
        known = _CHECKED.get(id(bounds))  # the usual bounds, checked once
        self.bounds = known[1] if known is not None and known[0] is bounds else _rising(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound counts in that bound's bucket (le).
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)


def _rising(bounds: Sequence[float]) -> tuple[float, ...]:
    """``bounds`` as floats; ValueError unless they rise."""
    if list(bounds) != sorted(set(bounds)) or not bounds:
        raise ValueError(f"histogram bounds must rise: {bounds!r}")
    return tuple(float(b) for b in bounds)


# Every immortal's engine and coordinator makes histograms of these: by their id, each
# with itself (so the id stays its own) and its checked form.
_CHECKED = {id(b): (b, _rising(b)) for b in (DURATION_BUCKETS, SIZE_BUCKETS)}


# ------------------------------------------------------------------ exposition


class Families:
    """The metric families one scrape gathers from every source, by name: sources that
    export the same name (two immortals in one process, say) add samples to one family,
    told apart by their labels."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[tuple[str, dict[str, str], float]]]] = {}

    def _family(self, name: str, kind: str, doc: str
                ) -> list[tuple[str, dict[str, str], float]]:
        got = self._families.get(name)
        if got is None:
            got = self._families[name] = (kind, doc, [])
        elif got[0] != kind:
            raise ValueError(f"metric {name} exported as both {got[0]} and {kind}")
        return got[2]

    def counter(self, name: str, doc: str, value: float, **labels: str) -> None:
        """A count that only rises (``name`` without ``_total``; the sample gets it)."""
        self._family(name, "counter", doc).append((f"{name}_total", labels, float(value)))

    def gauge(self, name: str, doc: str, value: float, **labels: str) -> None:
        self._family(name, "gauge", doc).append((name, labels, float(value)))

    def histogram(self, name: str, doc: str, hist: Histogram, **labels: str) -> None:
        samples = self._family(name, "histogram", doc)
        counts = list(hist.counts)  # one copy: the buckets and the count agree
        running = 0
        for bound, n in zip(hist.bounds, counts, strict=False):
            running += n
            samples.append((f"{name}_bucket", {**labels, "le": _le(bound)}, float(running)))
        running += counts[-1]
        samples.append((f"{name}_bucket", {**labels, "le": "+Inf"}, float(running)))
        samples.append((f"{name}_count", labels, float(running)))
        samples.append((f"{name}_sum", labels, hist.total))

    def metrics(self) -> list[Metric]:
        from prometheus_client.metrics_core import Metric

        out = []
        for name, (kind, doc, samples) in self._families.items():
            m = Metric(name, doc, kind)
            for sample_name, labels, value in samples:
                m.add_sample(sample_name, labels, value)
            out.append(m)
        return out


def _le(bound: float) -> str:
    return repr(bound)


#: What a process exports: called at each scrape, it adds what it reads to the families.
Source = Callable[[Families], None]


class MetricsServer:
    """The exposition server of one process and the sources it reads.

    Sources come and go as the parts of a process start and stop (a primary's I/O is
    made when it becomes primary); ``add`` and ``remove`` may be called from any thread.
    """

    def __init__(self, address: Address, flag: str = "--metrics") -> None:
        self.address = address
        self.flag = flag  # the option that named the address, for the refusal
        self._sources: list[Source] = []
        self._lock = threading.Lock()
        self._httpd: Any = None
        self._thread: threading.Thread | None = None

    def add(self, source: Source) -> None:
        with self._lock:
            self._sources.append(source)

    def remove(self, source: Source) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def collect(self) -> Iterator[Metric]:
        """prometheus_client's collector interface: every source, read now."""
        with self._lock:
            sources = list(self._sources)
        families = Families()
        for source in sources:
            source(families)
        yield from families.metrics()

    def start(self) -> None:
        """Listen and serve ``/metrics`` in a thread of its own (a daemon: it never keeps
        the process alive).

        Raises:
            MetricsError: the address cannot be listened on (one line).
        """
        from prometheus_client import start_http_server
        from prometheus_client.registry import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # a collector needs only collect()
        try:
            self._httpd, self._thread = start_http_server(
                self.address.port, self.address.host, registry)
        except OSError as err:
            raise _refusal(self.flag, self.address, err) from None

    @property
    def port(self) -> int:
        """The port served on (the one asked for)."""
        return int(self._httpd.server_address[1]) if self._httpd is not None else 0

    def close(self) -> None:
        """Stop serving and let go of the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None


def _refusal(flag: str, address: Address, err: OSError) -> MetricsError:
    why = (err.strerror or str(err)) if err.errno != errno.EADDRINUSE else (
        f"{os.strerror(errno.EADDRINUSE)} (another process listens on that port)")
    return MetricsError(f"{flag} {address}: cannot serve metrics there: {why}")


def check_address(address: Address, flag: str = "--metrics") -> None:
    """Refuse, before anything is written, an address where a process about to be
    started could not serve its metrics (``ambrosia run --coordinator-metrics``): the
    address is bound for a moment, as the exposition server binds it, and let go.
    Another program may still take the port in between; the process then refuses it.

    Raises:
        MetricsError: as ``MetricsServer.start`` (the message names ``flag``).
    """
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as sock:
            # As http.server's servers do: a port left in TIME_WAIT can be served.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
    except OSError as err:
        raise _refusal(flag, address, err) from None


def serve(address: Address | None, sources: Iterable[Source] = (),
          flag: str = "--metrics") -> MetricsServer | None:
    """Start serving ``sources`` at ``address``; None (nothing loaded or started) when
    no address was given: metrics are off unless asked for.

    Raises:
        MetricsError: the address cannot be listened on.
    """
    if address is None:
        return None
    server = MetricsServer(address, flag)
    for source in sources:
        server.add(source)
    server.start()
    return server
