"""Links between coordinators: authentication, framing, resend and acknowledgement.

One TCP connection carries one direction of calls, from a sender coordinator to the
coordinator of the destination instance (two instances calling each other use two
connections). The protocol is ours; the real coordinators talk through CRA instead.

Handshake (before anything else; ``S`` = receiver, ``C`` = sender)::

    S -> C  b"AMBRLNK1" + nonce_s (16 bytes)
    C -> S  zz32 len + sender name, zz32 len + destination name, nonce_c (16),
            HMAC-SHA256(secret, b"C" + nonce_s + nonce_c + sender + b"\\0" + destination)
    S -> C  HMAC-SHA256(secret, b"S" + nonce_c + nonce_s), int64 last logged seq number

``secret`` is the registry's link secret. With TLS (``ambrosia_core.tls``: ``ambrosia ic
--tls-cert/--tls-key/--tls-ca``) the connection is TLS from its first byte, both ends
showing a certificate the other's CA trusts, and all of the above travels inside it: the
handshake still proves the instance names, and TLS keeps the records that follow secret
and refuses any altered, replayed or cut on the way (without TLS they travel in clear).
A peer that fails its proof, or names an instance that is not registered (nor published
in the cluster the receiver reads registrations from), is refused (the receiver logs it
and closes).

Then ``C -> S``: log records (the wire codec's records, ``Direction.LINK``) of
incoming-form ``Rpc`` frames. Each call has a link sequence number (1, 2, ... per sender
and destination); a record carries a run of consecutive calls, and its sequence id is the
number of the last one (so a record of ``k`` calls with id ``n`` holds ``n-k+1 .. n``).
Impulses are not reproduced by a sender's replay, so they travel unnumbered in control
records (sequence id -1), at most once. ``S -> C``:
``TrimTo(n)`` messages once the receiver has durably logged everything up to ``n``.
The sender keeps what is not yet trimmed and resends it after a reconnect from the
position the receiver reports; the receiver drops numbers it has already accepted.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import os
import ssl
import struct
from collections.abc import Callable, Iterable

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.errors import RemoteProtocolError
from ambrosia_core.loops import Backoff, write_unless_closing
from ambrosia_core.tls import Tls, TlsHandshakeError, describe_tls_error
from ambrosia_core.wire import (
    CONTROL_SEQ,
    Direction,
    Incomplete,
    MessageStreamDecoder,
    TrimTo,
    decode_zz32,
    encode_record,
    encode_zz32,
)
from ambrosia_ic.errors import LinkAuthenticationError

__all__ = ["HELLO_MAX", "LINK_MAGIC", "Hello", "OutboundLink", "challenge", "check_hello",
           "hello_reply", "not_registered", "open_link"]

# Version 2: records carry runs of calls (version 1 carried one call per record).
LINK_MAGIC = b"AMBRLNK2"
_NONCE = 16
_MAC = 32
_I64 = struct.Struct("<q")
HANDSHAKE_TIMEOUT = 10.0
MOVE_CHECK = 0.05  # seconds between looks at where an idle or unanswered link should go
MAX_RECORD_BODY = 1 << 20  # a record is cut once its calls reach this many bytes


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def _name(s: str) -> bytes:
    raw = s.encode("utf-8")
    return encode_zz32(len(raw)) + raw


# The longest hello a sender sends: two names of at most 128 bytes with their lengths,
# its nonce and its proof.
HELLO_MAX = 2 * (5 + 128) + _NONCE + _MAC


def challenge() -> tuple[bytes, bytes]:
    """The receiver's first bytes, and the nonce they carry."""
    nonce_s = os.urandom(_NONCE)
    return LINK_MAGIC + nonce_s, nonce_s


def _hello_name(buf: bytes | bytearray, pos: int) -> tuple[str, int] | None:
    try:
        n, body = decode_zz32(buf, pos)
    except Incomplete:
        return None
    except RemoteProtocolError:  # an over-long or overflowing length
        raise LinkAuthenticationError("malformed link handshake") from None
    if not 0 < n <= 128:
        raise LinkAuthenticationError(f"link handshake names an instance of {n} bytes")
    if len(buf) < body + n:
        return None
    try:
        return bytes(buf[body : body + n]).decode("utf-8"), body + n
    except UnicodeDecodeError:
        raise LinkAuthenticationError("link handshake name is not UTF-8") from None


@attrs.frozen
class Hello:
    """A sender's hello whose proof checked: who it is, its nonce, and the bytes it took."""

    sender: str
    nonce_c: bytes
    used: int


def check_hello(buf: bytes | bytearray, nonce_s: bytes, secret: bytes,
                my_name: str) -> Hello | None:
    """Receiver side of the handshake, sans-IO: the sender's hello at the start of
    ``buf`` checked, or None while it is incomplete. Whether the sender may link
    (the link server's ``known``) is asked separately: it may take a lookup.

    Raises:
        LinkAuthenticationError: the hello is malformed, or the peer did not prove it
            knows the secret, or wants another instance.
    """
    got = _hello_name(buf, 0)
    if got is None:
        return None
    sender, pos = got
    got = _hello_name(buf, pos)
    if got is None:
        return None
    dest, pos = got
    end = pos + _NONCE + _MAC
    if len(buf) < end:
        return None
    nonce_c = bytes(buf[pos : pos + _NONCE])
    proof = bytes(buf[pos + _NONCE : end])
    expected = _mac(secret, b"C", nonce_s, nonce_c, sender.encode(), b"\0", dest.encode())
    if not hmac.compare_digest(proof, expected):
        raise LinkAuthenticationError(
            f"peer claiming to be {sender!r} failed the link authentication"
        )
    if dest != my_name:
        raise LinkAuthenticationError(f"peer {sender!r} wanted {dest!r}, this is {my_name!r}")
    return Hello(sender, nonce_c, end)


def not_registered(sender: str) -> LinkAuthenticationError:
    return LinkAuthenticationError(f"peer {sender!r} is not a registered instance")


def hello_reply(secret: bytes, hello: Hello, nonce_s: bytes, last_logged: int) -> bytes:
    """The receiver's answer to an admitted hello: its proof and the last call logged."""
    return _mac(secret, b"S", hello.nonce_c, nonce_s) + _I64.pack(last_logged)


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
    try:
        head = await reader.readexactly(len(LINK_MAGIC) + _NONCE)
        if head[: len(LINK_MAGIC)] != LINK_MAGIC:
            raise LinkAuthenticationError(
                f"{Address(host, port)} does not speak the link protocol")
        nonce_s = head[len(LINK_MAGIC):]
        nonce_c = os.urandom(_NONCE)
        write_unless_closing(writer,
            _name(my_name) + _name(dest) + nonce_c
            + _mac(secret, b"C", nonce_s, nonce_c, my_name.encode(), b"\0", dest.encode())
        )
        await writer.drain()
        reply = await reader.readexactly(_MAC + 8)
    except asyncio.IncompleteReadError:
        writer.close()
        raise LinkAuthenticationError(f"{dest!r} refused the link") from None
    except ssl.SSLError as err:  # TLS 1.3: a refused certificate shows at the first read
        writer.close()
        raise TlsHandshakeError(f"TLS handshake with {Address(host, port)} failed: "
                                f"{describe_tls_error(err)}") from None
    except BaseException:
        writer.close()
        raise
    if not hmac.compare_digest(reply[:_MAC], _mac(secret, b"S", nonce_c, nonce_s)):
        writer.close()
        raise LinkAuthenticationError(
            f"the peer at {Address(host, port)} failed to prove it is {dest!r}")
    return reader, writer, _I64.unpack_from(reply, _MAC)[0]


# What a sender keeps for one destination, and what it writes when: the rule, without
# I/O. Replayable calls are numbered 1, 2, ... and kept until the receiver says it logged
# them (its TrimTo, or the position its handshake names); calls a replay regenerates that
# the receiver has already are dropped at once. While connected, ``to_send`` gives the
# records of the calls not yet written on this connection and the Impulses waiting (no
# number: at most once); after a reconnection everything after the receiver's position
# goes again, and the receiver takes only what is new (``coordinator.intake``).
class LinkOutbox:
    """The calls for one destination: numbered, kept until logged there, written once
    per connection."""

    def __init__(self, next_seq: int = 1,
                 unacked: Iterable[tuple[int, bytes]] | None = None) -> None:
        self.next_seq = next_seq
        self.unacked: collections.deque[tuple[int, bytes]] = collections.deque(unacked or ())
        self.acked = 0  # the highest number the receiver has said it logged
        self.impulses: collections.deque[bytes] = collections.deque()
        self.sent: int | None = None  # the last number written on this connection

    def add(self, rpc: bytes) -> int:
        """Queue a replayable call; returns its number."""
        seq = self.next_seq
        self.next_seq = seq + 1
        if seq > self.acked:  # a replayed call the receiver already has is dropped
            self.unacked.append((seq, rpc))
        return seq

    def add_run(self, rpcs: list[bytes]) -> bool:
        """``add`` each of ``rpcs``; returns whether any is kept."""
        seq = self.next_seq
        acked = self.acked
        append = self.unacked.append
        for rpc in rpcs:
            if seq > acked:
                append((seq, rpc))
            seq += 1
        self.next_seq = seq
        return seq - 1 > acked

    def add_impulse(self, rpc: bytes) -> None:
        self.impulses.append(rpc)

    def trim(self, upto: int) -> None:
        """The receiver logged everything up to ``upto``."""
        if upto > self.acked:
            self.acked = upto
        unacked = self.unacked
        while unacked and unacked[0][0] <= upto:
            unacked.popleft()

    def connected(self, position: int) -> None:
        """A connection is up; the receiver's handshake named ``position`` (what it
        logged): everything after it is to be written on this connection."""
        self.trim(position)
        self.sent = position

    def disconnected(self) -> None:
        self.sent = None

    def to_send(self) -> bytes:
        """The records to write now: the calls after the last one written on this
        connection, then the Impulses waiting (b"" when not connected)."""
        sent = self.sent
        if sent is None:
            return b""
        out: list[bytes] = []
        unacked = self.unacked
        if unacked and unacked[-1][0] > sent:
            out.append(self._records(sent))
            self.sent = unacked[-1][0]
        while self.impulses:
            out.append(encode_record(0, CONTROL_SEQ, self._take_impulses()))
        return b"".join(out)

    def snapshot(self) -> dict[str, object]:
        return {"next": self.next_seq, "unacked": [[s, b] for s, b in self.unacked]}

    def _records(self, sent: int) -> bytes:
        """The calls after ``sent``, as records of up to ``MAX_RECORD_BODY`` bytes."""
        unacked = self.unacked
        first = unacked[0][0]
        out: list[bytes] = []
        run: list[bytes] = []
        size = 0
        seq = sent
        for i in range(max(0, sent + 1 - first), len(unacked)):
            seq, rpc = unacked[i]
            run.append(rpc)
            size += len(rpc)
            if size >= MAX_RECORD_BODY:
                out.append(encode_record(0, seq, b"".join(run)))
                run.clear()
                size = 0
        if run:
            out.append(encode_record(0, seq, b"".join(run)))
        return b"".join(out)

    def _take_impulses(self) -> bytes:
        """Queued Impulses, up to about ``MAX_RECORD_BODY`` bytes of them."""
        run: list[bytes] = []
        size = 0
        while self.impulses and size < MAX_RECORD_BODY:
            rpc = self.impulses.popleft()
            run.append(rpc)
            size += len(rpc)
        return b"".join(run)


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
        # Between connection attempts; short: an active/active failover should cost
        # little more than a retry. Back to the floor once the receiver acknowledges.
        self.backoff = Backoff(floor=0.02, cap=0.1)
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
        while True:
            try:
                host, port = self.address()
                reader, writer, last = await asyncio.wait_for(
                    open_link(host, port, self.secret, self.my_name, self.dest, self.tls),
                    HANDSHAKE_TIMEOUT,
                )
            except (TimeoutError, OSError, LinkAuthenticationError) as err:
                if isinstance(err, LinkAuthenticationError | TlsHandshakeError):
                    if str(err) != self._said:  # a refusal repeats until someone acts
                        self._said = str(err)
                        self.log(f"link to {self.dest}: {err}")
                elif self._unreachable is not None:
                    self._unreachable()
                await asyncio.sleep(self.backoff.failed())
                continue
            except Exception as err:  # the registry may be mid-update: retry
                self.log(f"link to {self.dest}: {err}")
                await asyncio.sleep(0.5)
                continue
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
            if not self._progressed:
                # Nothing acknowledged on that connection: a receiver that admits us and
                # drops us at once is waited for like one that refuses, not hammered.
                await asyncio.sleep(self.backoff.failed())

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
                self.backoff.progress()  # the receiver logged calls: real progress
                self._progressed = True
