"""A runner address nothing listens on is said at once, and again while it lasts (once a
minute), never a silent wait behind "started"; reaching it later is said too."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from ambrosia_services.jobs import InitiatorJobs
from ambrosia_services.jobs.attempts import member_id
from ambrosia_services.jobs.link import Connected, JobLinks, RunnerAddress
from ambrosia_services.jobs.transport import Hello, exchange_hello

from ambrosia_core.ports import free_ports
from tests.launcher import until

COORDINATOR = uuid.UUID("c4c4c4c4-c4c4-c4c4-c4c4-c4c4c4c4c4c4")


def _cannot(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.getMessage().startswith("cannot reach runner")]


def test_an_unreachable_runner_is_said_once_then_its_reaching(
        caplog: pytest.LogCaptureFixture) -> None:
    (port,) = free_ports(1)
    member = member_id("r1")

    async def scenario() -> None:
        links = JobLinks(InitiatorJobs(COORDINATOR), [RunnerAddress(member, "127.0.0.1", port)],
                         max_backoff=0.05)
        async with links:
            await until(lambda: _cannot(caplog), "the first failed attempt said")
            await asyncio.sleep(0.6)  # a dozen failed attempts more, said no more

            async def runner(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                await exchange_hello(r, w, Hello(member))
                await asyncio.sleep(5)

            server = await asyncio.start_server(runner, "127.0.0.1", port)
            async with server:
                async with asyncio.timeout(10):
                    while not isinstance(await links.next_event(), Connected):
                        pass

    with caplog.at_level(logging.INFO, logger="ambrosia_services.jobs.link"):
        asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records]
    cannot = _cannot(caplog)
    assert len(cannot) == 1, said
    assert cannot[0].startswith(f"cannot reach runner {member} at 127.0.0.1:{port} (")
    assert cannot[0].endswith("for 0 s; jobs for it wait, retrying")
    assert any(m.startswith(f"runner {member} at 127.0.0.1:{port} reached after ")
               for m in said), said
