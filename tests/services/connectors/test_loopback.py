"""The sans-IO connection under a real asyncio transport on 127.0.0.1: the transport only
calls receive_data / next_event / send, and a broken connection writes its ERROR frame
and closes, which the peer reads as an ERROR event."""

from __future__ import annotations

import asyncio

from ambrosia_services.connectors import (
    NEED_DATA,
    SOURCE_VERSION,
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
    Role,
)


async def _read_event(conn: ConnectorConnection, reader: asyncio.StreamReader) -> Event:
    """The next event, reading the socket as often as needed."""
    while True:
        event = conn.next_event()
        if event is not NEED_DATA:
            return event  # type: ignore[return-value]
        conn.receive_data(await reader.read(65536))


async def _worker(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: list[object]
) -> None:
    """A minimal worker: answers HELLO with OK, NOTIFY with NOTIFY_ACK, acks every
    MESSAGE; on a protocol error it writes the ERROR frame and closes."""
    conn = ConnectorConnection(Role.WORKER, cookie=b"secret")
    try:
        while True:
            event = await _read_event(conn, reader)
            seen.append(event)
            match event:
                case Hello():
                    writer.write(conn.send(Ok(10)))
                case Notify(stream_id, _, por):
                    writer.write(conn.send(NotifyAck(True, stream_id, por)))
                case Message(stream_id, message_id, payload):
                    end = message_id + len(payload)
                    writer.write(conn.send(Ack(1, ((stream_id, end),))))
                case ConnectionClosed():
                    break
            await writer.drain()
    except ConnectorProtocolError as e:
        seen.append(e)
        writer.write(conn.take_error_frame())
        await writer.drain()
    writer.close()


async def _session(cookie: bytes) -> tuple[list[object], list[object]]:
    seen_by_worker: list[object] = []
    server = await asyncio.start_server(
        lambda r, w: _worker(r, w, seen_by_worker), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = ConnectorConnection(Role.CONNECTOR, cookie=cookie)
    seen_by_connector: list[object] = []
    writer.write(conn.send(Hello(SOURCE_VERSION, cookie, "feed", "f1")))
    first = await _read_event(conn, reader)
    seen_by_connector.append(first)
    if type(first) is Ok:
        writer.write(conn.send(Notify(1, "lines", 0)))
        seen_by_connector.append(await _read_event(conn, reader))
        for offset, line in ((0, b"a\n"), (2, b"bb\n")):
            writer.write(conn.send(Message(1, offset, line)))
            seen_by_connector.append(await _read_event(conn, reader))
        writer.write(conn.send(EosMessage(1)))
        writer.write(conn.send(ConnectionClosed()))
    writer.close()
    await writer.wait_closed()
    for _ in range(200):  # the worker finishes on its own once it reads the close
        if seen_by_worker and isinstance(seen_by_worker[-1], ConnectionClosed | Exception):
            break
        await asyncio.sleep(0.01)
    server.close()
    await server.wait_closed()
    return seen_by_connector, seen_by_worker


def test_a_session_over_loopback() -> None:
    by_connector, by_worker = asyncio.run(_session(b"secret"))
    assert by_connector == [
        Ok(10),
        NotifyAck(True, 1, 0),
        Ack(1, ((1, 2),)),
        Ack(1, ((1, 5),)),
    ]
    assert by_worker == [
        Hello(SOURCE_VERSION, b"secret", "feed", "f1"),
        Notify(1, "lines", 0),
        Message(1, 0, b"a\n"),
        Message(1, 2, b"bb\n"),
        EosMessage(1),
        ConnectionClosed(),
    ]


def test_a_wrong_cookie_gets_an_error_frame_and_a_close() -> None:
    by_connector, by_worker = asyncio.run(_session(b"guess"))
    assert by_connector == [ErrorFrame("HELLO carries a wrong cookie")]
    assert len(by_worker) == 1
    assert str(by_worker[0]) == "HELLO carries a wrong cookie (offset 0, message type 0)"
