"""The link server's protocol over real sockets: the handshake parsed from whatever
segments it comes in (records right behind the hello included), a refused peer, and
back-pressure (a paused server reads nothing until it resumes)."""

from __future__ import annotations

import asyncio
import collections
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ambrosia_ic import registry
from ambrosia_ic.binding import LOOPBACK
from ambrosia_ic.coordinator.core import CoordinatorCore
from ambrosia_ic.coordinator.link_server import LinkServer
from ambrosia_ic.coordinator.phase import Phase
from ambrosia_ic.links.handshake import LINK_MAGIC, _mac, _name
from ambrosia_ic.links.outbound import open_link

from ambrosia_core.ports import free_ports
from ambrosia_core.wire import Rpc, TrimTo, encode_record
from tests.launcher import until

SECRET = b"k" * 32
Queued = collections.deque[tuple[str | None, int | None, bytes]]


def _record(seq: int, calls: int) -> bytes:
    return encode_record(0, seq, b"".join(Rpc(7, 1, bytes((seq, i))).encode()
                                          for i in range(calls)))


def _serve(tmp_path: Path,
           test: Callable[[LinkServer, Queued, list[str], list[int]], Awaitable[None]]) -> None:
    rp, sp, icp = free_ports(3)
    registry.register(instance_name="A", receive_port=rp, send_port=sp, ic_port=icp,
                      log_dir=str(tmp_path / "logs"), home=tmp_path)
    # What the server hands over goes through a coordinator's core (its link intake),
    # live: the calls it queues for the log are what the test sees.
    core = CoordinatorCore("B", 1)
    core.phase = Phase.LIVE
    queued: Queued = core.group.pending
    lines: list[str] = []
    bursts: list[int] = []

    async def main() -> None:
        server = LinkServer("B", tmp_path, SECRET, free_ports(1)[0], core.logged,
                            core.link_record, lines.append,
                            burst_done=lambda: bursts.append(len(queued)))
        await server.open()
        try:
            await test(server, queued, lines, bursts)
        finally:
            server.close()

    asyncio.run(main())


def test_records_behind_the_hello_in_one_segment_are_queued_and_acknowledged(
        tmp_path: Path) -> None:
    async def test(server: LinkServer, queued: Queued, lines: list[str],
                   bursts: list[int]) -> None:
        loop = asyncio.get_running_loop()
        with socket.create_connection((LOOPBACK, server.port)) as s:
            s.setblocking(False)
            head = b""
            while len(head) < len(LINK_MAGIC) + 16:
                head += await loop.sock_recv(s, 64)
            nonce_s, nonce_c = head[len(LINK_MAGIC):], bytes(16)
            hello = (_name("A") + _name("B") + nonce_c
                     + _mac(SECRET, b"C", nonce_s, nonce_c, b"A", b"\0", b"B"))
            # The hello, two records and half a third, all in one write.
            third = _record(5, 2)
            await loop.sock_sendall(s, hello + _record(1, 1) + _record(3, 2) + third[:9])
            reply = b""
            while len(reply) < 40:
                reply += await loop.sock_recv(s, 64)
            assert reply[:32] == _mac(SECRET, b"S", nonce_c, nonce_s)
            await until(lambda: len(queued) == 2, "the first two records queued")
            assert [(k, n) for k, n, _ in queued] == [("A", 1), ("A", 3)]
            assert bursts and bursts[-1] == 2  # committed after the read that brought them
            await loop.sock_sendall(s, third[9:])
            await until(lambda: len(queued) == 3, "the third record queued")
            # Acknowledgements made close together go out as one, the highest.
            server.acknowledge({"A": 3})
            server.acknowledge({"A": 5, "C": 1})  # C has no link: nothing to send it
            got = b""
            while len(got) < len(TrimTo(5).encode()):
                got += await loop.sock_recv(s, 64)
            assert got == TrimTo(5).encode()
            await asyncio.sleep(0.05)
            try:
                got = s.recv(64)
            except BlockingIOError:
                got = b""
            assert got == b""
        assert lines == []

    _serve(tmp_path, test)


def test_a_hello_with_a_wrong_proof_is_refused_with_one_line(tmp_path: Path) -> None:
    async def test(server: LinkServer, queued: Queued, lines: list[str],
                   bursts: list[int]) -> None:
        reader, writer = await asyncio.open_connection(LOOPBACK, server.port)
        await reader.readexactly(len(LINK_MAGIC) + 16)
        writer.write(_name("A") + _name("B") + bytes(16) + bytes(32) + _record(1, 1))
        assert await reader.read(100) == b""  # closed without a word
        writer.close()
        await until(lambda: lines, "the refusal logged")
        assert len(lines) == 1 and lines[0].startswith("refused a link from 127.0.0.1:")
        assert lines[0].endswith("peer claiming to be 'A' failed the link authentication")
        assert list(queued) == []

    _serve(tmp_path, test)


def test_a_paused_server_reads_nothing_until_it_resumes(tmp_path: Path) -> None:
    async def test(server: LinkServer, queued: Queued, lines: list[str],
                   bursts: list[int]) -> None:
        _, writer, last = await open_link(LOOPBACK, server.port, SECRET, "A", "B")
        assert last == 0
        writer.write(_record(1, 1))
        await until(lambda: len(queued) == 1, "the first record queued")
        server.pause()
        writer.write(_record(2, 1))
        await writer.drain()
        await asyncio.sleep(0.3)
        assert len(queued) == 1
        server.resume()
        await until(lambda: len(queued) == 2, "the held record queued once resumed")
        assert [n for _, n, _ in queued] == [1, 2]
        writer.close()

    _serve(tmp_path, test)


def test_links_pause_while_the_binding_reads_nothing_or_the_log_is_behind(
        tmp_path: Path) -> None:
    """``commit.regulate`` over a real send connection whose binding stops reading."""
    from ambrosia_ic.coordinator import commit

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, binding = socket.socketpair()
        binding.setblocking(False)
        _, send = await asyncio.open_connection(sock=ours)
        server = LinkServer("B", tmp_path, SECRET, 0, lambda s: 0, lambda s, rec: None, print)
        pending: collections.deque[Any] = collections.deque()
        c: Any = SimpleNamespace(send=send, link_server=server, drain_wait=None,
                                 core=SimpleNamespace(group=SimpleNamespace(pending=pending)),
                                 spawn=loop.create_task)
        commit.regulate(c)
        assert not server.paused
        sent = 8 << 20  # more than the socket's buffers hold: the rest waits in ours
        send.write(bytes(sent))
        commit.regulate(c)
        assert server.paused and c.drain_wait is not None
        await asyncio.sleep(0.1)
        assert server.paused  # still nothing read
        got = 0
        while got < sent:
            got += len(await loop.sock_recv(binding, 1 << 20))
        await until(lambda: not server.paused and c.drain_wait is None, "links resumed")
        pending.extend([(None, None, b"x")] * (commit.MAX_PENDING + 1))
        commit.regulate(c)
        assert server.paused  # the log is behind
        pending.clear()
        commit.regulate(c)
        assert not server.paused
        send.close()
        binding.close()

    asyncio.run(main())


def test_a_sender_that_stops_inside_a_record_is_closed_in_time(tmp_path: Path) -> None:
    """Idle between records is fine; part of a record and then silence is closed with one
    line (a stalled peer used to hold its link for ever)."""
    async def test(server: LinkServer, queued: Queued, lines: list[str],
                   bursts: list[int]) -> None:
        server.stall_seconds = 1.5
        loop = asyncio.get_running_loop()
        with socket.create_connection((LOOPBACK, server.port)) as s:
            s.setblocking(False)
            head = b""
            while len(head) < len(LINK_MAGIC) + 16:
                head += await loop.sock_recv(s, 64)
            nonce_s, nonce_c = head[len(LINK_MAGIC):], bytes(16)
            hello = (_name("A") + _name("B") + nonce_c
                     + _mac(SECRET, b"C", nonce_s, nonce_c, b"A", b"\0", b"B"))
            await loop.sock_sendall(s, hello + _record(1, 1))
            await until(lambda: len(queued) == 1, "the first record queued")
            await asyncio.sleep(2.0)  # idle between records: still linked
            assert lines == []
            second = _record(3, 2)
            await loop.sock_sendall(s, second[:5])
            await asyncio.sleep(1.0)
            await loop.sock_sendall(s, second[5:12])  # progress: the time starts again
            await asyncio.sleep(1.0)
            assert lines == []  # 2 s after the record began, but 1 s since its progress
            await until(lambda: lines, "the stalled link closed")
            got = b""
            while True:
                chunk = await loop.sock_recv(s, 64)
                if not chunk:
                    break
                got += chunk
        assert lines == ["link from A sent part of a record and nothing more for 1.5 s; "
                         "closed (it sends again from the position acknowledged)"]
        assert len(queued) == 1

    _serve(tmp_path, test)


def _calls(first: int, last: int) -> bytes:
    """The frames of link calls ``first``..``last``: call n carries n, so any two differ."""
    return b"".join(Rpc(7, 1, n.to_bytes(2, "little")).encode() for n in range(first, last + 1))


def test_a_resent_run_is_queued_from_the_first_call_not_yet_accepted(tmp_path: Path) -> None:
    """A sender that reconnects resends from its last acknowledgement, so a record may
    overlap what was accepted: only its new calls are queued, whole ones are dropped,
    and a gap is refused. (Queuing the overlap again would apply calls twice.)"""
    async def test(server: LinkServer, queued: Queued, lines: list[str],
                   bursts: list[int]) -> None:
        loop = asyncio.get_running_loop()
        with socket.create_connection((LOOPBACK, server.port)) as s:
            s.setblocking(False)
            head = b""
            while len(head) < len(LINK_MAGIC) + 16:
                head += await loop.sock_recv(s, 64)
            nonce_s, nonce_c = head[len(LINK_MAGIC):], bytes(16)
            hello = (_name("A") + _name("B") + nonce_c
                     + _mac(SECRET, b"C", nonce_s, nonce_c, b"A", b"\0", b"B"))
            records = [encode_record(0, 3, _calls(1, 3)),  # calls 1..3
                       encode_record(0, 3, _calls(1, 3)),  # all of it again: dropped
                       encode_record(0, 7, _calls(2, 7)),  # 2..3 again, 4..7 new
                       encode_record(0, 8, _calls(8, 8))]
            await loop.sock_sendall(s, hello + b"".join(records))
            await until(lambda: len(queued) == 3, "three records queued")
            await asyncio.sleep(0.05)
            assert list(queued) == [("A", 3, _calls(1, 3)), ("A", 7, _calls(4, 7)),
                              ("A", 8, _calls(8, 8))]
            await loop.sock_sendall(s, encode_record(0, 12, _calls(10, 12)))  # 9 is missing
            await until(lambda: lines, "the gap said")
        assert len(queued) == 3
        assert "link calls 10..12 from A after 8" in lines[0], lines

    _serve(tmp_path, test)
