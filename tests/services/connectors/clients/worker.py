"""A scripted worker for the feed tests: an asyncio server on 127.0.0.1 speaking the
worker role through the sans-IO ``ConnectorConnection``.

Its durable state is ``applied`` (stream id -> the last message id applied), shared by
every connection, so a reconnecting feed is told exactly where to resume. ``script`` says
what to do to the Nth connection after it has received some messages: drop it, send
ERROR, send RESTART."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ambrosia_services.connectors import (
    POINT_OF_REFERENCE_FROM_START,
    Ack,
    ConnectionClosed,
    ConnectorConnection,
    ConnectorProtocolError,
    EosMessage,
    ErrorFrame,
    Event,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Restart,
    Role,
)


class Worker:
    def __init__(
        self,
        *,
        credits: int = 100,
        ack_credits: int = 1,
        auto_ack: bool = True,
        refusals: int = 0,
        applied: dict[int, int] | None = None,
        script: dict[int, tuple[int, Callable[[ConnectorConnection], bytes | None]]] | None = None,
        apply_before_drop: bool = True,
    ) -> None:
        self.credits = credits
        self.ack_credits = ack_credits
        self.auto_ack = auto_ack
        self.refusals = refusals
        self.applied: dict[int, int] = dict(applied or {})
        self.script = script or {}
        self.apply_before_drop = apply_before_drop
        self.events: list[tuple[int, Event]] = []  # (connection number, event)
        self.messages: list[Message] = []  # every data message applied, in order
        self.connections = 0
        self.granted = 0
        self.used = 0
        self.overdrawn = False
        self.writers: list[asyncio.StreamWriter] = []
        self.conns: list[ConnectorConnection] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.close()

    def ack(self, n: int, credits: int, acks: tuple[tuple[int, int], ...]) -> None:
        """Send an ACK on connection ``n`` (1-based) from the test."""
        self.granted += credits
        self.writers[n - 1].write(self.conns[n - 1].send(Ack(credits, acks)))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        conn = ConnectorConnection(Role.WORKER)
        self.writers.append(writer)
        self.conns.append(conn)
        after, action = self.script.get(number, (-1, lambda _c: None))
        seen = 0
        self.granted = self.used = 0
        try:
            while True:
                data = await reader.read(1 << 16)
                conn.receive_data(data)
                for event in conn.events():
                    self.events.append((number, event))
                    if isinstance(event, Notify | Message | EosMessage):
                        self.used += 1
                        self.overdrawn |= self.used > self.granted
                    if isinstance(event, Message):
                        seen += 1
                        if seen == after:
                            if self.apply_before_drop:
                                self._apply(event)
                            reply = action(conn)
                            if reply is not None:
                                writer.write(reply)
                            await writer.drain()
                            writer.close()
                            return
                    for out in self._answer(event):
                        writer.write(conn.send(out))
                    if isinstance(event, ConnectionClosed | ErrorFrame):
                        writer.close()
                        return
                await writer.drain()
        except ConnectorProtocolError:
            writer.write(conn.take_error_frame())
            writer.close()
        except OSError:
            writer.close()

    def _apply(self, m: Message) -> None:
        if m.message_id > self.applied.get(m.stream_id, -1):  # a re-sent one is dropped
            self.applied[m.stream_id] = m.message_id
            self.messages.append(m)

    def _answer(self, event: Event) -> list[Event]:
        """The replies; with ``auto_ack`` every frame's credit comes back, as the
        protocol document asks of a worker ("acknowledge frames of all types")."""
        out: list[Event] = []
        match event:
            case Hello():
                self.granted += self.credits
                out.append(Ok(self.credits))
            case Notify(stream_id):
                if self.refusals > 0:
                    self.refusals -= 1
                    out.append(NotifyAck(False, stream_id, 0))
                else:
                    por = self.applied.get(stream_id, POINT_OF_REFERENCE_FROM_START)
                    out.append(NotifyAck(True, stream_id, por))
            case Message():
                self._apply(event)
        if self.auto_ack and isinstance(event, Notify | Message | EosMessage):
            self.granted += self.ack_credits
            acks = ((event.stream_id, event.message_id),) if isinstance(event, Message) else ()
            out.append(Ack(self.ack_credits, acks))
        return out


def restart_to(port: int) -> Callable[[ConnectorConnection], bytes]:
    return lambda conn: conn.send(Restart(f"127.0.0.1:{port}"))


def error(conn: ConnectorConnection) -> bytes:
    return conn.send(ErrorFrame("scripted failure"))


def drop(_conn: ConnectorConnection) -> None:
    return None
