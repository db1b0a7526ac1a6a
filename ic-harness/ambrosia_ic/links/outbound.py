"""A sender's link to one destination: a task that connects (``open_link``),
writes what the destination's ``outbox.LinkOutbox`` says is due, reads the receiver's
acknowledgements, and reconnects after a break or when the destination moves, under a
declared retry (``LINK_RETRY``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import Callable

from ambrosia_core.addresses import Address
from ambrosia_core.errors import RemoteProtocolError
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.retry import Attempts, Retry
from ambrosia_core.tls import Tls, TlsHandshakeError, describe_tls_error
from ambrosia_core.wire import Direction, MessageStreamDecoder, TrimTo
from ambrosia_ic.errors import LinkAuthenticationError

from .handshake import (
    CHALLENGE_SIZE,
    HANDSHAKE_TIMEOUT,
    REPLY_SIZE,
    make_hello,
    reply_position,
)
from .outbox import LinkOutbox

__all__ = ["LINK_RETRY", "MOVE_CHECK", "OutboundLink", "open_link"]

MOVE_CHECK = 0.05  # seconds between looks at where an idle or unanswered link should go
REGISTRY_PAUSE = 0.5  # after an unexpected error, such as a registry mid-update

LINK_RETRY = Retry(floor=0.02, cap=0.1, on=(Exception,))
"""A link's connections: each is an attempt, which always ends with an error, and any
error is tried again (the registry may be mid-update); between attempts 20 ms doubling
to 100 ms, short: an active/active failover should cost little more than a retry. Only
the receiver's acknowledgement resets it (a connection is not progress)."""


class _EndedError(Exception):
    """A connection ended (the receiver went away, broke the protocol or the TLS, or the
    destination moved): connect again."""

    def __init__(self, progressed: bool) -> None:
        super().__init__("the link's connection ended")
        self.progressed = progressed  # something was acknowledged on it


class OutboundLink:
    """Everything a sender keeps for one destination: the next link sequence number, the
    calls not yet trimmed by the receiver, and a task that (re)connects and sends them.

    ``add`` never blocks and works before the link is up: calls wait in ``unacked``.
    ``box``, if given, is the outbox to run (``next_seq`` and ``unacked`` are then unused).
    They are written soon after (or, with ``flush_soon=False``, when ``flush`` is called).
    """

    def __init__(
        self,
        my_name: str,
        dest: str,
        secret: bytes,
        address: Callable[[], tuple[str, int]],
        log: Callable[[str], None],
        next_seq: int = 1,
        unacked: list[tuple[int, bytes]] | None = None,
        *,
        box: LinkOutbox | None = None,
        flush_soon: bool = True,
        unreachable: Callable[[], None] | None = None,
        tls: Tls | None = None,
    ) -> None:
        self.my_name = my_name
        self.tls = tls
        self._said: str | None = None  # the last refusal logged, said once a streak
        self.dest = dest
        self.secret = secret
        self.address = address
        self.log = log
        # The calls, and what goes out when (a coordinator's core owns its outboxes).
        self.box = box if box is not None else LinkOutbox(next_seq, unacked)
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        # While connected: the stream, and the last number written to it. Calls added
        # in one turn of the event loop go out together in one write (``flush``).
        self._out: asyncio.StreamWriter | None = None
        self._flush_due = False
        # False: the owner calls ``flush`` itself after each batch of adds (a coordinator
        # does after each read from its binding), which saves a turn of the event loop.
        self._flush_soon = flush_soon
        # Called at each failed connection attempt (the owner may look for a new address).
        self._unreachable = unreachable
        # Its connections, under ``LINK_RETRY`` (what is said and waited: ``_delay``).
        self.attempts = Attempts(LINK_RETRY, delay=self._delay)
        self._progressed = False  # an acknowledgement came on the current connection

    # ------------------------------------------------------------------ state
    @property
    def next_seq(self) -> int:
        return self.box.next_seq

    @property
    def unacked(self) -> collections.deque[tuple[int, bytes]]:
        return self.box.unacked

    @property
    def acked(self) -> int:
        """The highest number the receiver has confirmed as logged."""
        return self.box.acked

    def add(self, rpc: bytes) -> int:
        """Queue a replayable call; returns its link sequence number."""
        seq = self.box.add(rpc)
        if seq > self.box.acked:
            self._schedule()
        return seq

    def add_run(self, rpcs: list[bytes]) -> None:
        """``add`` each of ``rpcs`` in turn (a read's run of calls to this destination)."""
        if self.box.add_run(rpcs):
            self._schedule()

    def add_impulse(self, rpc: bytes) -> None:
        self.box.add_impulse(rpc)
        self._schedule()

    def _schedule(self) -> None:
        if self._flush_soon and self._out is not None and not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what was added since the last write, if connected (called soon after
        each add, or at once by a coordinator about to block on an fsync)."""
        self._flush_due = False
        out = self._out
        if out is None or out.transport.is_closing():
            return  # the stream's task sees the break and reconnects
        data = self.box.to_send()
        if data:
            out.write(data)

    def trim(self, upto: int) -> None:
        self.box.trim(upto)

    def snapshot(self) -> dict[str, object]:
        return self.box.snapshot()

    # ------------------------------------------------------------------ I/O
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        # Cancel until it takes: before Python 3.12, wait_for can swallow a cancellation
        # that arrives as its inner future completes, and the link would run on.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=MOVE_CHECK)
        if not task.cancelled():
            with contextlib.suppress(Exception):
                task.result()

    async def _run(self) -> None:
        await self.attempts.run(self._connection)

    async def _connection(self) -> None:
        """One connection, until it ends (always with an error)."""
        host, port = self.address()
        reader, writer, last = await asyncio.wait_for(
            open_link(host, port, self.secret, self.my_name, self.dest, self.tls),
            HANDSHAKE_TIMEOUT,
        )
        self.connected = True
        self._progressed = False
        self._said = None
        try:
            await self._stream(reader, writer, last, (host, port))
        except RemoteProtocolError as err:
            self.log(f"link to {self.dest}: the receiver broke the protocol: {err}")
        except ssl.SSLError as err:  # an altered, replayed or cut TLS record
            self.log(f"link to {self.dest}: {describe_tls_error(err)}; reconnecting")
        except (OSError, asyncio.IncompleteReadError):
            pass  # the receiver went away: reconnect, resend from where it says
        finally:
            self.connected = False
            writer.close()
        raise _EndedError(self._progressed)

    def _delay(self, err: Exception, attempts: Attempts) -> float:
        """The wait before the next connection, and what is said of the last attempt."""
        if isinstance(err, _EndedError):
            # Nothing acknowledged on that connection: a receiver that admits us and
            # drops us at once is waited for like one that refuses, not hammered.
            return 0.0 if err.progressed else attempts.next_wait()
        if isinstance(err, LinkAuthenticationError | TlsHandshakeError):
            if str(err) != self._said:  # a refusal repeats until someone acts
                self._said = str(err)
                self.log(f"link to {self.dest}: {err}")
        elif isinstance(err, TimeoutError | OSError):
            if self._unreachable is not None:
                self._unreachable()
        else:  # the registry may be mid-update: retry
            self.log(f"link to {self.dest}: {err}")
            return REGISTRY_PAUSE
        return attempts.next_wait()

    def _moved(self, where: tuple[str, int]) -> bool:
        """True when the destination's primary is now elsewhere (an active/active
        failover): a paused old primary keeps its socket open, so only the registry
        tells the sender to go."""
        try:
            return self.address() != where
        except Exception:  # the registry may be mid-update: look again later
            return False

    async def _stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, last: int,
        where: tuple[str, int],
    ) -> None:
        """Sends until the connection breaks or the destination moves. Writes happen in
        ``flush``; this task only watches the acknowledgements and the registry. The
        calls wait in ``unacked`` until trimmed, so the socket's buffer needs no bound of
        its own: a receiver that stops reading is left when the registry says it moved."""
        self.box.connected(last)
        acks = asyncio.get_running_loop().create_task(self._read_acks(reader))
        self._out = writer
        try:
            self.flush()
            while True:
                done, _ = await asyncio.wait({acks}, timeout=MOVE_CHECK)
                if done:
                    acks.result()  # raises the reason the connection broke
                    return
                if self._moved(where):
                    return
        finally:
            self._out = None
            self.box.disconnected()
            acks.cancel()
            with contextlib.suppress(BaseException):
                await acks

    async def _read_acks(self, reader: asyncio.StreamReader) -> None:
        decoder = MessageStreamDecoder(direction=Direction.LINK, max_frame_size=64)
        while True:
            data = await reader.read(4096)
            if not data:
                raise ConnectionResetError("the receiver closed the link")
            decoder.receive_data(data)
            for ev in decoder.events():
                if not isinstance(ev, TrimTo):
                    raise RemoteProtocolError(f"unexpected {type(ev).__name__} on a link")
                self.trim(ev.seq_id)
                self.attempts.progress()  # the receiver logged calls: real progress
                self._progressed = True


async def open_link(
    host: str, port: int, secret: bytes, my_name: str, dest: str, tls: Tls | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """Sender side: connect (over TLS with ``tls``) and authenticate both ways. Returns
    the streams and the last link sequence number the receiver has durably logged from us.

    Raises:
        LinkAuthenticationError: the handshake failed (TlsHandshakeError: TLS's did).
        OSError: the receiver cannot be reached.
    """
    if tls is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = await tls.connect(host, port)
    where = str(Address(host, port))
    try:
        head = await reader.readexactly(CHALLENGE_SIZE)
        hello, nonce_c = make_hello(head, secret, my_name, dest, where)
        write_unless_closing(writer, hello)
        await writer.drain()
        reply = await reader.readexactly(REPLY_SIZE)
    except asyncio.IncompleteReadError:
        writer.close()
        raise LinkAuthenticationError(f"{dest!r} refused the link") from None
    except ssl.SSLError as err:  # TLS 1.3: a refused certificate shows at the first read
        writer.close()
        raise TlsHandshakeError(f"TLS handshake with {where} failed: "
                                f"{describe_tls_error(err)}") from None
    except BaseException:
        writer.close()
        raise
    try:
        return reader, writer, reply_position(reply, secret, head, nonce_c, dest, where)
    except LinkAuthenticationError:
        writer.close()
        raise
