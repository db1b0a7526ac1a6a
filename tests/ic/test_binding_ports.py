"""The binding ports over real sockets: a connection only becomes the binding's once its
partner on the other port arrives, so a stranger that connects first cannot hold the
binding's slot."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ambrosia_ic.binding import LOOPBACK, BindingPorts

from ambrosia_core.ports import free_ports

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _connect(port: int) -> Streams:
    return await asyncio.open_connection(LOOPBACK, port)


async def _closed_by_peer(reader: asyncio.StreamReader) -> bool:
    try:
        return await reader.read(1) == b""
    except ConnectionResetError:
        return True


async def _served(ports: BindingPorts, receive: Streams, send: Streams) -> None:
    """``accept()`` hands over exactly these two connections: bytes written to the
    receive connection reach the coordinator, and its replies reach the send one."""
    reader, writer = await ports.accept()
    receive[1].write(b"from the binding")
    assert await reader.readexactly(16) == b"from the binding"
    writer.write(b"to the binding")
    assert await send[0].readexactly(14) == b"to the binding"


def _run(test: Callable[[BindingPorts, list[str]], Awaitable[None]],
         pair_timeout: float) -> list[str]:
    lines: list[str] = []

    async def main() -> None:
        rp, sp = free_ports(2)
        ports = BindingPorts(rp, sp, lines.append, pair_timeout=pair_timeout)
        await ports.open()
        try:
            await test(ports, lines)
        finally:
            ports.close()

    asyncio.run(main())
    return lines


def test_a_receive_connection_without_a_partner_is_dropped_and_the_binding_served() -> None:
    async def test(ports: BindingPorts, lines: list[str]) -> None:
        stranger = await _connect(ports.receive_port)
        assert await _closed_by_peer(stranger[0])
        stranger[1].close()
        ports.pair_timeout = 3600  # the binding's two connections may come further apart
        receive = await _connect(ports.receive_port)
        send = await _connect(ports.send_port)
        await _served(ports, receive, send)
        for _, w in (receive, send):
            w.close()

    lines = _run(test, pair_timeout=0.05)
    assert len(lines) == 1, lines
    assert lines[0].startswith("dropped a connection to the receive port from 127.0.0.1:")
    assert lines[0].endswith(": no connection to the send port followed within 0.05 s")


def test_a_stranger_still_waiting_is_replaced_by_the_binding() -> None:
    async def test(ports: BindingPorts, lines: list[str]) -> None:
        stranger = await _connect(ports.receive_port)
        receive = await _connect(ports.receive_port)
        send = await _connect(ports.send_port)
        await _served(ports, receive, send)
        assert await _closed_by_peer(stranger[0])
        for _, w in (stranger, receive, send):
            w.close()

    # The timeout is far away: only the binding's arrival can have dropped the stranger.
    lines = _run(test, pair_timeout=3600)
    assert len(lines) == 1, lines
    assert lines[0].endswith(": a newer connection to the receive port replaced it")


def test_the_send_port_first_works_too_and_a_lone_send_connection_is_dropped() -> None:
    async def test(ports: BindingPorts, lines: list[str]) -> None:
        stranger = await _connect(ports.send_port)
        assert await _closed_by_peer(stranger[0])
        stranger[1].close()
        ports.pair_timeout = 3600  # the binding's two connections may come further apart
        send = await _connect(ports.send_port)
        receive = await _connect(ports.receive_port)
        await _served(ports, receive, send)
        for _, w in (receive, send):
            w.close()

    lines = _run(test, pair_timeout=0.05)
    assert len(lines) == 1, lines
    assert "to the send port" in lines[0] and "the receive port followed" in lines[0]


def test_once_the_binding_is_served_the_ports_stop_listening_and_close_ends_it() -> None:
    async def test(ports: BindingPorts, lines: list[str]) -> None:
        receive = await _connect(ports.receive_port)
        send = await _connect(ports.send_port)
        await _served(ports, receive, send)
        for port in (ports.receive_port, ports.send_port):
            try:
                late = await _connect(port)
            except OSError:
                continue  # refused: nobody listens any more
            assert await _closed_by_peer(late[0])
            late[1].close()
        ports.close()
        assert await _closed_by_peer(send[0])
        for _, w in (receive, send):
            w.close()

    assert _run(test, pair_timeout=3600) == []
