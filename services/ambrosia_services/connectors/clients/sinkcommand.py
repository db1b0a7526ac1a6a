"""A sink command's serving: its shared options, where it listens, and the loop that serves
one ``SinkServer`` over the store the command opens, until a stop or the store's failure.

Both sink commands (``filesink``, ``pgsink``) are this over their own store.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from ambrosia_core.addresses import Address, address_argument
from ambrosia_core.errors import UsageError
from ambrosia_core.metrics import MetricsError, MetricsServer, add_metrics_option
from ambrosia_core.metrics import serve as serve_metrics
from ambrosia_core.tls import Tls, TlsOptions, add_tls_options, tls_from_args
from ambrosia_services.connectors import DEFAULT_MAX_FRAME_SIZE

from . import sinkserver
from .errors import SinkConfigError
from .sinkmetrics import sink_source
from .sinkserver import SinkServer, SinkStore, listen

__all__ = ["add_server_options", "serve"]

log = logging.getLogger("ambrosia_services.connectors.clients.sinkserver")


def add_server_options(p: argparse.ArgumentParser, default_port: int) -> None:
    """The options every sink command shares: where it listens, the cookie, metrics, TLS."""
    p.add_argument("--listen", type=address_argument(allow_port_zero=True),
                   default=Address("127.0.0.1", default_port), metavar="[HOST:]PORT",
                   help=f"where to listen (default 127.0.0.1:{default_port}; port 0 picks "
                   "one)")
    p.add_argument("--cookie", default="", help="the cookie a HELLO must carry")
    add_metrics_option(p, what="the sink's")
    add_tls_options(p)


async def serve(open_store: Callable[[], Awaitable[SinkStore]], args: argparse.Namespace,
                describe: Callable[[SinkStore], str]) -> None:
    """Serve the store ``open_store`` opens as the options in ``args`` say, until SIGINT
    or SIGTERM (an ordinary stop) or until the store fails for good (raised).

    Everything the options can be refused for is refused before the store is opened
    (which may create its directory or its tables): the TLS files, listening beyond
    loopback without TLS, the metrics address and the listening address. ``describe``
    says what the store is in the "listening on" line.

    Raises:
        SinkConfigError: the options cannot be used, or the address cannot be listened
            on (one line).
    """
    # (args made by hand, not by add_server_options, may lack the TLS options)
    try:
        options = (tls_from_args(args) if hasattr(args, "tls_cert") else TlsOptions())
        options.check_listen(args.listen.host, "the sink", log.warning)
        tls = options.load()
    except UsageError as e:
        raise SinkConfigError(str(e)) from None
    try:
        # (args made by hand, not by add_server_options, may lack the option)
        metrics = serve_metrics(getattr(args, "metrics", None))
    except MetricsError as e:
        raise SinkConfigError(str(e)) from None
    try:
        sinks: list[SinkServer] = []  # the one sink, once its store is open

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await sinks[0]._serve(reader, writer)

        try:
            server = await listen(args.listen, handle, tls, sinkserver.HANDSHAKE_SECONDS,
                                  start_serving=False)
        except OSError as e:
            raise SinkConfigError(f"--listen {args.listen}: cannot listen there: "
                                  f"{os.strerror(e.errno) if e.errno else e}") from None
        store: SinkStore | None = None
        try:
            async with server:  # closed before the store
                store = await open_store()
                await _serve(store, server, args, tls, metrics, describe(store), sinks)
        finally:
            if store is not None:
                await store.close()
    finally:
        if metrics is not None:
            metrics.close()


async def _serve(store: SinkStore, server: asyncio.Server, args: argparse.Namespace,
                 tls: Tls | None, metrics: MetricsServer | None, what: str,
                 sinks: list[SinkServer]) -> None:
    sink = SinkServer(store, cookie=args.cookie.encode(), tls=tls,
                      max_frame_size=DEFAULT_MAX_FRAME_SIZE,
                      handshake_seconds=sinkserver.HANDSHAKE_SECONDS)
    sinks.append(sink)
    if metrics is not None:
        metrics.add(sink_source(sink))
    await server.start_serving()
    host, port = server.sockets[0].getsockname()[:2]
    log.info("listening on %s%s (%s)", Address(host, port), " over TLS" if tls else "", what)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    failing: asyncio.Future[Any] = sink.failed
    await asyncio.wait([stopping, failing], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if sink.failed.done():
        raise sink.failed.result()
