"""The coordinator's peers, scripted for tests: a source connector over a blocking socket,
and a 2PC sink server (asyncio, on its own thread) that keeps its bytes in memory and
enforces the rules of Wallaroo's 2PC file sink (aloc_sink)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from ambrosia_services.connectors import (
    Ack,
    ConnectionClosed,
    ConnectorConnection,
    ConnectorProtocolError,
    ErrorFrame,
    Hello,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Restart,
    Role,
    TwoPCReply,
)

from ambrosia_core.wire import NEED_DATA

FROM_START = 2**64 - 1


class Source:
    """A source connector on a blocking socket (the connector role)."""

    def __init__(self, port: int, *, cookie: bytes = b"", version: str = "0.0.1",
                 timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.conn = ConnectorConnection(Role.CONNECTOR, cookie=cookie,
                                        versions=[version])
        self.cookie = cookie
        self.version = version
        self.acked: dict[int, int] = {}  # stream id -> the highest PoR ACKed
        self.credits_back = 0
        self.restart: Restart | None = None

    def send(self, *events: Any) -> None:
        self.sock.sendall(b"".join(self.conn.send(e) for e in events))

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self) -> Any:
        """The next event that is not an ACK (ACKs are recorded)."""
        while True:
            event = self.step()
            if event is not None:
                return event

    def step(self) -> Any:
        """One event (None for an ACK, which is recorded), reading if need be."""
        event = self.conn.next_event()
        while event is NEED_DATA:
            self.conn.receive_data(self.sock.recv(65536))
            event = self.conn.next_event()
        if isinstance(event, Ack):
            self.credits_back += event.credits
            for sid, por in event.acks:
                self.acked[sid] = max(self.acked.get(sid, 0), por)
            return None
        if isinstance(event, Restart):
            self.restart = event
        return event

    def hello(self) -> Ok:
        self.send(Hello(self.version, self.cookie, "test-source", "src"))
        ok = self.next()
        assert isinstance(ok, Ok), ok
        return ok

    def notify(self, sid: int, name: str) -> NotifyAck:
        self.send(Notify(sid, name, 0))
        ack = self.next()
        assert isinstance(ack, NotifyAck), ack
        return ack

    def wait_acked(self, sid: int, por: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        self.sock.settimeout(timeout)
        while self.acked.get(sid, -1) < por:
            assert time.monotonic() < deadline, f"stream {sid} not ACKed up to {por}"
            event = self.step()
            assert event is None, f"{event!r} while waiting for ACKs"

    def error_reply(self) -> str:
        """The reason in the ERROR frame the coordinator answers with; then it closes."""
        while True:
            try:
                event = self.next()
            except ConnectorProtocolError:
                raise
            if isinstance(event, ErrorFrame):
                assert self.sock.recv(1) == b"", "the connection stays open after ERROR"
                return event.reason
            assert not isinstance(event, ConnectionClosed), "closed without ERROR"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def lines(sid: int, ids: Iterable[int]) -> list[Message]:
    return [Message(sid, i, b"s%d line %d\n" % (sid, i)) for i in ids]


class MemorySink:
    """A 2PC sink server on its own thread, with aloc_sink's rules. ``votes``: the votes
    to give, in order (then yes). ``drop_after_phase1``: close the connection (once) on
    receiving a Phase1, before voting; ``drop_after_vote``: once, vote yes and close.
    ``restarted``: answer NOTIFY with offset 0 whatever it holds, as aloc_sink does after a
    restart (the offset comes from its memory; its checks use its file's)."""

    def __init__(self, *, cookie: bytes = b"", votes: Iterable[bool] = (),
                 drop_after_phase1: bool = False, drop_after_vote: bool = False) -> None:
        self.cookie = cookie
        self.votes = list(votes)
        self.drop_after_phase1 = drop_after_phase1
        self.drop_after_vote = drop_after_vote
        self.restarted = False
        self.output = bytearray()  # committed, then prepared, then written
        self.committed = 0
        self.prepared: dict[str, tuple[int, int]] = {}
        self.violations: list[str] = []  # broken sink rules (a real sink would die)
        self.phase1s: list[str] = []
        self.phase2s: list[tuple[str, bool]] = []
        self.listed: list[tuple[str, ...]] = []
        self.connections = 0
        self._force_abort = False
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                await server.serve_forever()

        with contextlib.suppress(BaseException):
            self._loop.run_until_complete(main())

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    @property
    def committed_bytes(self) -> bytes:
        return bytes(self.output[:self.committed])

    def _prepared_end(self) -> int:
        return max([self.committed, *(e for _, e in self.prepared.values())])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = ConnectorConnection(Role.WORKER, cookie=self.cookie, twopc=True)
        try:
            while True:
                data = await reader.read(65536)
                conn.receive_data(data)
                for event in conn.events():
                    reply = self._on(event)
                    if reply == "drop":
                        return
                    if reply is None:
                        continue
                    if isinstance(reply, ConnectionClosed):
                        return
                    writer.write(conn.send(reply))
                    if isinstance(reply, TwoPCReply) and reply.commit and self.drop_after_vote:
                        self.drop_after_vote = False
                        await writer.drain()
                        return
                await writer.drain()
        except ConnectorProtocolError as e:
            self.violations.append(f"protocol: {e}")
            writer.write(conn.take_error_frame())
        except (ConnectionError, OSError):
            pass
        finally:
            # Bytes written but in no Phase1 do not survive the connection.
            del self.output[self._prepared_end():]
            writer.close()

    def _on(self, event: Any) -> Any:
        match event:
            case Hello():
                return Ok(500)
            case Notify(sid, _name, _por):
                if sid != 1:
                    self.violations.append(f"NOTIFY of stream {sid}")
                return NotifyAck(True, 1, 0 if self.restarted else len(self.output))
            case Message(1, mid, payload):
                if mid < len(self.output):
                    self.violations.append(f"duplicate data at {mid} (offset {len(self.output)})")
                elif mid > len(self.output):
                    self._force_abort = True
                self.output += payload
            case ListUncommitted(rtag):
                listed = tuple(self.prepared)
                self.listed.append(listed)
                return ReplyUncommitted(rtag, listed)
            case Phase1(txn, where):
                self.phase1s.append(txn)
                (w,) = where
                if self.drop_after_phase1:
                    self.drop_after_phase1 = False
                    self.prepared[txn] = (w.start, w.end)
                    return "drop"
                vote = self.votes.pop(0) if self.votes else True
                ok = (vote and not self._force_abort and w.start == self.committed
                      and w.end <= len(self.output))
                self._force_abort = False
                self.prepared[txn] = (w.start, w.end)
                return TwoPCReply(txn, ok)
            case Phase2(txn, commit):
                self.phase2s.append((txn, commit))
                span = self.prepared.pop(txn, None)
                if span is None:
                    self.violations.append(f"Phase2 of unknown {txn}")
                    return None
                start, end = span
                if commit:
                    if end != len(self.output) or start != self.committed:
                        self.violations.append(f"commit of {txn} [{start},{end}) with output "
                                               f"{len(self.output)}")
                    self.committed = end
                else:
                    if start < self.committed:
                        self.violations.append(f"abort of {txn} would cut committed data")
                    del self.output[start:]
            case ConnectionClosed():
                return event
        return None


class Feed:
    """A source connector on a thread that sends messages 1..n of one stream, resuming
    from NOTIFY_ACK's point of reference after every loss (as Wallaroo's line feed does:
    the message at that point is sent again), until all n are ACKed."""

    def __init__(self, port: int, sid: int, n: int, *, chunk: int = 25,
                 pause: float = 0.0) -> None:
        self.port, self.sid, self.n, self.chunk, self.pause = port, sid, n, chunk, pause
        self.resumes: list[tuple[int, int]] = []  # (highest ACKed before, NOTIFY_ACK PoR)
        self.acked = 0
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while self.acked < self.n:
                try:
                    self._session()
                except (OSError, ConnectorProtocolError, AssertionError):
                    time.sleep(0.05)
            self.done.set()
        except BaseException as e:  # pragma: no cover - reported by join()
            self.failure = e
            self.done.set()

    def _session(self) -> None:
        src = Source(self.port, timeout=5)
        try:
            src.hello()
            ack = src.notify(self.sid, f"stream-{self.sid}")
            por = ack.point_of_reference
            self.resumes.append((self.acked, por))
            nxt = 1 if por == FROM_START else por
            while self.acked < self.n:
                upto = min(nxt + self.chunk, self.n + 1)
                src.send(*lines(self.sid, range(nxt, upto)))
                nxt = upto
                src.wait_acked(self.sid, nxt - 1, timeout=5)
                self.acked = max(self.acked, src.acked[self.sid])
                time.sleep(self.pause)
        finally:
            src.close()

    def join(self, timeout: float) -> None:
        assert self.done.wait(timeout), f"the feed of stream {self.sid} did not finish"
        if self.failure is not None:
            raise self.failure
