"""A superseded replica's notice reaches its binding however the binding's bytes and the
close cross (``replication.common.notify_superseded``, ``Coordinator.shutdown``).

A coordinator that closed the receive connection at once, with bytes of its binding's
still unread, reset the connection, and the binding's reader raised the reset instead of
giving it the notice it already had: the binding said "coordinator closed the
connection" and stopped instead of starting afresh (seen under load, in
``tests/activeactive/test_rejoin.py``). Here the binding writes before and after the
notice, as a busy binding does, over real sockets with the real reader on each side.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from ambrosia_ic import registry
from ambrosia_ic.coordinator import lifecycle
from ambrosia_ic.coordinator.lifecycle import Coordinator
from ambrosia_ic.coordinator.reading import EXIT_BINDING_LOST, BindingReader
from ambrosia_ic.replication.common import notify_superseded

from ambrosia_core.superseded import SUPERSEDED
from ambrosia_py.runtime.runner import _read_notice


def _coordinator(tmp_path: Path) -> Coordinator:
    home = tmp_path / "home"
    rp, sp, ip = registry.unregistered_free_ports(3, home)
    reg = registry.register(instance_name="sq", receive_port=rp, send_port=sp, ic_port=ip,
                            log_dir=tmp_path / "logs", home=home)
    return Coordinator(reg, home)


async def _connected(c: Coordinator) -> tuple[asyncio.StreamReader, asyncio.StreamWriter,
                                                asyncio.Server]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: BindingReader(c), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    notices, writer = await asyncio.open_connection("127.0.0.1", port)
    while c.binding_receive is None:
        await asyncio.sleep(0.01)
    return notices, writer, server


def test_the_notice_is_read_though_the_binding_was_still_writing(tmp_path: Path) -> None:
    async def run() -> bool:
        c = _coordinator(tmp_path)
        notices, writer, server = await _connected(c)
        done = c._done = asyncio.get_running_loop().create_future()  # as ``process.serve``
        # Bytes the coordinator has not read yet when it finds itself superseded, and
        # more after the notice (not a valid message: passed to the core, they would
        # end the coordinator as malformed).
        writer.write(b"\x00" * 4096)
        notify_superseded(c)
        shutdown = asyncio.ensure_future(c.shutdown())
        writer.write(b"\x00" * 4096)
        # A binding reads the notice only once it has stopped its own work, after the
        # send connection closed: by then its reader has seen all that came.
        await asyncio.sleep(0.3)
        got = await _read_notice(notices)
        writer.close()
        await shutdown
        # It closed once the binding closed its end, not at the end of its wait.
        assert c.binding_gone.is_set()
        # The bytes after the notice were dropped, not read as messages: the coordinator
        # ends as its binding went away (1), not as a binding that sent malformed bytes.
        assert done.result()[0] == EXIT_BINDING_LOST
        assert c.binding_receive is not None and c.binding_receive.is_closing()
        server.close()
        return got

    assert asyncio.run(run()) is True


def test_a_binding_that_never_reads_the_notice_is_closed_after_a_bounded_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "NOTICE_LINGER", 0.3)

    async def run() -> bytes:
        c = _coordinator(tmp_path)
        notices, writer, server = await _connected(c)
        notify_superseded(c)
        await c.shutdown()  # the binding (another language's) neither reads nor closes
        assert not c.binding_gone.is_set()
        got = await asyncio.wait_for(notices.read(), 5)  # the notice, then the end
        writer.close()
        server.close()
        return got

    assert asyncio.run(run()) == SUPERSEDED


def test_a_coordinator_that_gave_no_notice_does_not_wait_for_its_binding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "NOTICE_LINGER", 30.0)

    async def run() -> None:
        c = _coordinator(tmp_path)
        _notices, writer, server = await _connected(c)
        await asyncio.wait_for(c.shutdown(), 10)  # a stop: nothing to wait for
        assert not c.notice_given
        writer.close()
        server.close()

    asyncio.run(run())
