"""The source feed: sends files (tailed) or iterators to a worker, exactly where it resumes.

The connector end of a source link, on asyncio: one connection at a time to one of the
configured addresses; HELLO, then a NOTIFY per stream; each stream resumes after the
NOTIFY_ACK's point of reference (see ``sources``); MESSAGEs go out only while credits
last, and the feed waits for ACKs when they run out. Any loss, ERROR or protocol error
ends the connection and the feed reconnects after an exponential back-off with jitter
(capped); a RESTART sends it to the RESTART's address, or else to the next configured
address, round robin. A refused NOTIFY_ACK (another connection holds the stream) is
retried on the same connection after a back-off of its own.

A feed without TLS whose connection is closed before the worker answered anything asks
the listener once, in TLS, whether it speaks TLS (``ambrosia_core.tls.speaks_tls``): a TLS
listener closes a plain peer so, without a byte (OpenSSL sends no alert to a peer that
speaks no TLS), and so does a plain worker that is stopping. If it answers in TLS, the
feed stops with ``WorkerSpeaksTlsError`` (``ambrosia-feed``: one line, exit 1) rather
than reconnect for ever; any other outcome is a reconnect as before.

A stream whose source finishes (a file without ``follow``, an exhausted iterator) gets an
EOS_MESSAGE, and is done once an ACK covers its last record; the feed returns when every
stream is done, and never while one follows a file.

    ambrosia-feed --connect 127.0.0.1:7100 [--connect ...] [--once] FILE...

(or ``python -m ambrosia_services.connectors.clients.feed``)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from collections.abc import Sequence

from ambrosia_core.addresses import Address, address_argument
from ambrosia_core.errors import UsageError
from ambrosia_core.loops import said_at
from ambrosia_core.retry import Attempts, Retry
from ambrosia_core.tls import (
    Tls,
    TlsHandshakeError,
    add_tls_options,
    speaks_tls,
    tls_from_args,
)
from ambrosia_services.connectors import (
    DEFAULT_MAX_FRAME_SIZE,
)

from .errors import ClientError, WorkerSpeaksTlsError
from .feed_session import FeedSession, FeedStream, SessionEndError, StreamPhase
from .sources import FileSource, RecordSource

__all__ = ["Feed", "main"]

log = logging.getLogger(__name__)

# The longest reconnect delay: a worker that comes back is reached within 5 s, and one that
# stays down is asked at most once every 2.5 to 5 s by each feed (the delay is jittered).
BACKOFF_CAP = 5.0
# How often a followed file is checked for new lines: at most 100 ms of added latency, for
# ten stat calls a second.
POLL_SECONDS = 0.1


class Feed(FeedSession):
    """Sends ``sources`` to a worker at one of ``addresses``.

    Args:
        sources: one per stream; their stream ids must differ.
        addresses: where workers listen; tried in turn.
        cookie: the cookie the worker expects.
        instance_name: the HELLO's instance name (the program name is "ambrosia-feed").
        backoff_base, backoff_cap: the reconnect delay doubles from ``backoff_base`` up to
            ``backoff_cap`` seconds with each failed attempt (each delay is jittered to
            between half and all of it), and starts again after a connection that opened
            a stream.
        poll_interval: how often a followed file is checked for new lines, in seconds.
        rng: the jitter's random numbers (seed one for repeatable runs).
        tls: connect over TLS, checking the worker's certificate and showing ours (None:
            plain TCP, the Wallaroo protocol as its real peers speak it, for loopback).
    """

    def __init__(
        self,
        sources: Sequence[RecordSource],
        addresses: Sequence[Address],
        *,
        cookie: bytes = b"",
        instance_name: str = "feed",
        backoff_base: float = 0.05,
        backoff_cap: float = BACKOFF_CAP,
        poll_interval: float = POLL_SECONDS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        rng: random.Random | None = None,
        tls: Tls | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("a feed needs at least one address")
        ids = [s.stream_id for s in sources]
        if len(set(ids)) != len(ids):
            raise ValueError(f"two sources share a stream id: {sorted(ids)}")
        self._rng = rng or random.Random()
        # Reconnects, and each stream's NOTIFYs while it is held elsewhere: both doubling
        # from ``backoff_base`` to ``backoff_cap``; what resets each is said where it is.
        self.retry = Retry(floor=backoff_base, cap=backoff_cap, on=(OSError, SessionEndError))
        self.streams = {s.stream_id: FeedStream(s, Attempts(self.retry, rng=self._rng))
                        for s in sources}
        self.addresses = list(addresses)
        self.cookie = cookie
        self.instance_name = instance_name
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.poll_interval = poll_interval
        self.max_frame_size = max_frame_size
        self.tls = tls
        self.attempts = Attempts(self.retry, rng=self._rng, delay=self._said)
        self._target: Address | None = None  # where the next connection goes
        self._refused = 0  # connection attempts refused in a row
        self._refused_by: Address | None = None  # the address that refused the last
        self._next = 0
        self._wake = asyncio.Event()
        self.sessions = 0
        """Connections that got as far as OK."""
        self._opened = 0  # successful NOTIFY_ACKs: a connection that made progress

    @property
    def done(self) -> bool:
        return all(s.phase is StreamPhase.DONE for s in self.streams.values())

    def acked(self, stream_id: int) -> int | None:
        """The last point of reference the worker reported for the stream."""
        return self.streams[stream_id].acked

    async def run(self) -> None:
        """Send until every stream is done (forever while one follows a file).

        Raises:
            FeedSourceError: a source broke its promise (the feed cannot go on).
            WorkerSpeaksTlsError: the feed has no TLS and a worker closed its connection
                unanswered, then answered a TLS hello in TLS.
        """
        if not self.done:
            await self.attempts.run(self._connection)
        log.info("every stream is done")

    async def _connection(self) -> None:
        """One connection, until every stream is done (returns) or it ends (raises: an
        ``OSError`` or ``SessionEndError`` is tried again)."""
        if self._target is None:
            self._target = self.addresses[self._next % len(self.addresses)]
            self._next += 1
        target = self._target
        try:
            if self.tls is None:
                reader, writer = await asyncio.open_connection(target.host, target.port)
            else:
                reader, writer = await self.tls.connect(target.host, target.port)
        except OSError:
            self._refused += 1
            self._refused_by, self._target = target, None
            raise
        log.info("connected to %s%s", target,
                 f" after {self._refused} failed attempts" if self._refused > 1 else "")
        self._refused = 0
        opened_before = self._opened
        try:
            await self._session(reader, writer)
            end = SessionEndError("finished")
        except SessionEndError as e:
            end = e
        finally:
            writer.close()
            for stream in self.streams.values():
                if stream.phase is not StreamPhase.DONE:
                    stream.phase = StreamPhase.IDLE
        if self.done:
            return
        if end.unanswered and self.tls is None and await speaks_tls(target.host,
                                                                    target.port):
            raise WorkerSpeaksTlsError(
                f"the worker at {target} speaks TLS (it closed our plain connection "
                "unanswered, and answered a TLS hello): start the feed with "
                "--tls-cert, --tls-key and --tls-ca (or $AMBROSIA_TLS_CERT, _KEY, _CA)")
        if end.restart_to is not None or self._opened > opened_before:
            self.attempts.progress()  # it opened a stream, or was told where to go
        self._target = end.restart_to
        raise end

    def _said(self, error: Exception, attempts: Attempts) -> float:
        """The wait before the next connection, and what is said of the last one."""
        delay = attempts.next_wait()
        if isinstance(error, SessionEndError):
            log.info("connection ended: %s; reconnecting in %.2f s", error.reason, delay)
        elif said_at(self._refused):  # the first of a streak, then counted
            again = "" if self._refused == 1 else f" ({self._refused} attempts in a row)"
            # A refused certificate needs a person: said as a warning.
            say = log.warning if isinstance(error, TlsHandshakeError) else log.info
            strerror = error.strerror if isinstance(error, OSError) else None
            say("cannot connect to %s (%s)%s; retrying with back-off up to %g s",
                self._refused_by, strerror or error, again, self.retry.cap)
        return delay


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="ambrosia-feed",
        description="Send files, line by line, to a Wallaroo connector protocol worker.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="a file to send (one stream each)")
    p.add_argument("--connect", action="append", required=True, type=address_argument(),
                   metavar="HOST:PORT", help="a worker's address (repeat for several)")
    p.add_argument("--cookie", default="", help="the cookie the worker expects")
    p.add_argument("--once", action="store_true",
                   help="stop at each file's end (EOS), once the worker acknowledged it all")
    p.add_argument("--instance-name", default="feed",
                   help="the HELLO's instance name (default feed)")
    p.add_argument("--message-bytes", type=int, default=0, metavar="N",
                   help="send as many whole lines as fit in N bytes per message (default: "
                        "a message per line)")
    add_tls_options(p, listens=False)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ambrosia-feed: %(message)s")
    if args.message_bytes < 0:
        p.error("--message-bytes must be 0 or more")
    sources = [FileSource(f, follow=not args.once, message_bytes=args.message_bytes)
               for f in args.files]
    try:
        feed = Feed(sources, args.connect, cookie=args.cookie.encode(),
                    instance_name=args.instance_name, backoff_cap=BACKOFF_CAP,
                    poll_interval=POLL_SECONDS, tls=tls_from_args(args).load())
        asyncio.run(_run(feed))
    except (ClientError, ValueError, UsageError) as e:
        print(f"ambrosia-feed: {e}", file=sys.stderr)
        return 1
    return 0


async def _run(feed: Feed) -> None:
    task = asyncio.ensure_future(feed.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped")


if __name__ == "__main__":
    sys.exit(main())
