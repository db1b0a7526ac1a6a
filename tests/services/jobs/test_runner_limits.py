"""A runner's limits on its connections, set by constructor arguments (no Spark needed:
no job runs): half a frame held too long, and connections past the most it takes."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from pathlib import Path

import pytest
from ambrosia_services.jobs import Check, JobConnection, Role
from ambrosia_services.jobs.attempts import member_id
from ambrosia_services.jobs.runner import Runner
from ambrosia_services.jobs.spark.registry import JobRegistry
from ambrosia_services.jobs.transport import HELLO_MAGIC, HELLO_SIZE, Hello, exchange_hello

COORDINATOR = uuid.UUID("c3c3c3c3-c3c3-c3c3-c3c3-c3c3c3c3c3c3")
MEMBER = member_id("r1")


def _runner(tmp_path: Path, **limits: float) -> Runner:
    return Runner(MEMBER, JobRegistry(()), "sc://127.0.0.1:1", tmp_path, **limits)  # type: ignore[arg-type]


def test_a_linked_initiator_that_stops_mid_frame_is_closed_in_time(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Idle between frames is fine; half a frame held for longer than the runner's
    frame_seconds is not (it used to hold the connection for ever)."""
    async def scenario() -> None:
        runner = _runner(tmp_path, frame_seconds=1.0)
        port = await runner.listen()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert (await exchange_hello(reader, writer, Hello(COORDINATOR))).peer == MEMBER
            await asyncio.sleep(1.5)  # idle between frames: still linked
            assert not reader.at_eof()
            writer.write(bytes.fromhex("000000"))  # three bytes of a frame's length
            async with asyncio.timeout(10):
                rest = await reader.read()  # the runner's check, then closed
            conn = JobConnection(Role.INITIATOR, Role.PARTICIPANT)
            conn.receive_data(rest)
            assert list(conn.events()) == [Check(())]
            writer.close()
        finally:
            await runner.close()

    with caplog.at_level(logging.INFO, logger="ambrosia_services.jobs"):
        asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records]
    assert (f"closing connection from initiator {COORDINATOR}: the rest of a frame not "
            "sent within 1 s") in said, said


def test_connections_past_the_limit_are_closed_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        runner = _runner(tmp_path, max_connections=3)
        port = await runner.listen()
        loop = asyncio.get_running_loop()

        def clients() -> None:
            held = [socket.create_connection(("127.0.0.1", port), timeout=10)
                    for _ in range(3)]
            try:
                for s in held:  # each is served: the runner's hello arrives
                    assert s.recv(HELLO_SIZE).startswith(HELLO_MAGIC)
                with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
                    assert extra.recv(1) == b""  # closed, no hello
            finally:
                for s in held:
                    s.close()

        try:
            await loop.run_in_executor(None, clients)
        finally:
            await runner.close()

    with caplog.at_level(logging.INFO, logger="ambrosia_services.jobs"):
        asyncio.run(scenario())
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "refused a connection from" in said and "3 connections are open" in said, said
