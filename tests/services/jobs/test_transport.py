"""The job link's hello: who is at the other end, and the terms both ends agree."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from ambrosia_services.jobs import InitiatorJobs, JobId
from ambrosia_services.jobs.connection import DEFAULT_BATCH_BYTES, DEFAULT_INITIAL_CREDITS
from ambrosia_services.jobs.errors import HelloError
from ambrosia_services.jobs.link import Connected, JobLinks, RunnerAddress
from ambrosia_services.jobs.transport import (
    HELLO_SIZE,
    Hello,
    LinkTerms,
    agree,
    exchange_hello,
    parse_hello,
)

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def test_a_hello_is_36_bytes_and_reads_back() -> None:
    hello = Hello(A, 4096, 1024)
    data = hello.encode()
    assert len(data) == HELLO_SIZE == 36
    assert data == b"AMBJOB02" + A.bytes + bytes.fromhex("0000000000001000 00000400")
    assert parse_hello(data) == hello


@pytest.mark.parametrize(("data", "said"), [
    (b"AMBJOB01" + bytes(28), "not a job link hello: b'AMBJOB01' instead of b'AMBJOB02'"),
    (b"AMBJOB02" + bytes(28), "offering 0 credits and batches of 0 bytes"),
])
def test_a_foreign_or_empty_hello_is_refused_in_one_line(data: bytes, said: str) -> None:
    with pytest.raises(HelloError, match=said):
        parse_hello(data)


def test_both_ends_agree_the_smaller_credit_and_batch() -> None:
    small, large = Hello(A, 4096, 8192), Hello(B, 1 << 20, 1024)
    assert agree(small, large) == LinkTerms(B, 4096, 1024)
    assert agree(large, small) == LinkTerms(A, 4096, 1024)
    # A batch never exceeds the credit, whoever offered the larger batch.
    assert agree(Hello(A, 100, 500), Hello(B, 1000, 800)).batch_bytes == 100


def test_an_initiator_and_a_runner_offering_different_terms_use_the_same() -> None:
    """What the runner's --credits and --batch-bytes had to be set to by hand: the
    initiator's JobLinks offers small terms, the runner its defaults; both ends hold the
    smaller (a runner that kept its own would overrun the initiator's credit)."""
    at_runner: list[LinkTerms] = []

    async def scenario() -> int:
        async def runner(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            at_runner.append(await exchange_hello(r, w, Hello(B)))
            await r.read()

        server = await asyncio.start_server(runner, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            links = JobLinks(InitiatorJobs(A), [RunnerAddress(B, "127.0.0.1", port)],
                             initial_credits=4096, batch_bytes=1024)
            async with links, asyncio.timeout(10):
                assert isinstance(await links.next_event(), Connected)
                conn = links._links[B].conn
                assert conn is not None
                return conn.send_credit(JobId(A, 0), 0)

    assert asyncio.run(scenario()) == 4096  # the initiator's end of the link
    assert DEFAULT_INITIAL_CREDITS > 4096 and DEFAULT_BATCH_BYTES > 1024
    assert at_runner == [LinkTerms(A, 4096, 1024)]


def test_a_silent_peer_is_a_hello_error() -> None:
    async def scenario() -> None:
        async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.read()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            with pytest.raises(HelloError, match="no hello from the peer within 0 s"):
                await exchange_hello(reader, writer, Hello(A), timeout=0.2)
            writer.close()

    asyncio.run(scenario())


def test_an_end_of_the_old_hello_is_refused_in_one_line() -> None:
    """An end that speaks the 24-byte ``AMBJOB01`` hello reads 24 of our 36 bytes, finds
    another magic and closes: this end says so, and no frame is parsed."""
    async def scenario() -> None:
        async def old(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(b"AMBJOB01" + B.bytes)
            if (await r.readexactly(24))[:8] != b"AMBJOB01":
                w.close()

        server = await asyncio.start_server(old, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            with pytest.raises(HelloError, match=r"^the peer closed after 24 hello bytes$"):
                await exchange_hello(reader, writer, Hello(A), timeout=10)
            writer.close()

    asyncio.run(scenario())
