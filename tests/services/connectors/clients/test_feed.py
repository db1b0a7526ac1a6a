"""The source feed against a scripted worker on 127.0.0.1: where it resumes, credits,
reconnects (a drop, an ERROR, a RESTART to another worker, a refused NOTIFY), tailing a
growing file, iterators, and the command line with --once."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import re
import sys
from pathlib import Path

import pytest
from ambrosia_services.connectors import EosMessage, Hello, Message, Notify
from ambrosia_services.connectors.clients import Address, FeedSourceError
from ambrosia_services.connectors.clients.feed import Feed
from ambrosia_services.connectors.clients.sources import FileSource, IteratorSource, RecordSource

from tests.launcher import until

from ....pki import make_pki
from .helpers import ROOT, free_port
from .worker import Worker, drop, error, restart_to

FEED = "ambrosia_services.connectors.clients.feed"

LINES = [b"a\n", b"bb\n", b"ccc\n", b"d\n", b"eeeee\n", b"f\n"]
OFFSETS = [0, 2, 5, 9, 11, 17]


def _file(tmp_path: Path, lines: list[bytes] = LINES) -> Path:
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(lines))
    return path


def _feed(sources: list[RecordSource], ports: list[int], poll_interval: float = 0.1) -> Feed:
    return Feed(
        sources, [Address("127.0.0.1", p) for p in ports], backoff_base=0.01,
        backoff_cap=0.05, poll_interval=poll_interval, rng=random.Random(1),
    )


def _sent(worker: Worker) -> list[tuple[int, bytes]]:
    return [(m.message_id, m.payload) for m in worker.messages]


async def _run(feed: Feed, timeout: float = 20.0) -> None:
    await asyncio.wait_for(feed.run(), timeout)


def test_resumes_after_the_point_of_reference_skipping_the_record_at_it(tmp_path: Path) -> None:
    path = _file(tmp_path)
    sid = int.from_bytes(hashlib.sha256(str(path).encode()).digest()[:8], "big")

    async def main() -> None:
        worker = Worker(applied={sid: 2})  # "bb\n" (at byte 2) and all before it applied
        port = await worker.start()
        await _run(_feed([FileSource(path, follow=False)], [port]))
        worker.close()
        received = [e for _n, e in worker.events if isinstance(e, Message)]
        assert received == worker.messages  # "bb\n" itself is not sent again
        assert _sent(worker) == list(zip(OFFSETS[2:], LINES[2:], strict=True))
        assert {m.key for m in worker.messages} == {str(path).encode()}
        kinds = [e for _n, e in worker.events if not isinstance(e, Message)]
        assert kinds == [Hello("0.0.1", b"", "ambrosia-feed", "feed"),
                         Notify(sid, str(path), 0), EosMessage(sid)]

        fresh = Worker()  # U64 max: from the start
        port = await fresh.start()
        await _run(_feed([FileSource(path, follow=False)], [port]))
        fresh.close()
        assert _sent(fresh) == list(zip(OFFSETS, LINES, strict=True))

        odd = Worker(applied={sid: 3})  # not a line start: refused loudly
        port = await odd.start()
        with pytest.raises(FeedSourceError, match="not the start of a line"):
            await _run(_feed([FileSource(path, follow=False)], [port]))
        odd.close()

    asyncio.run(main())


def test_waits_when_out_of_credits(tmp_path: Path) -> None:
    path = _file(tmp_path)

    async def main() -> None:
        worker = Worker(credits=3, auto_ack=False)
        port = await worker.start()
        task = asyncio.ensure_future(_run(_feed([FileSource(path, follow=False)], [port])))
        await until(lambda: len(worker.messages) == 2, "two MESSAGEs")
        await asyncio.sleep(0.3)
        assert _sent(worker) == list(zip(OFFSETS[:2], LINES[:2], strict=True))  # NOTIFY + 2
        sid = worker.messages[0].stream_id
        worker.ack(1, 2, ((sid, 2),))
        await until(lambda: len(worker.messages) == 4, "four MESSAGEs")
        await asyncio.sleep(0.3)
        assert len(worker.messages) == 4
        worker.ack(1, 10, ((sid, 9),))
        await until(lambda: any(isinstance(e, EosMessage) for _n, e in worker.events), "the EOS")
        await asyncio.sleep(0.2)
        assert not task.done()  # EOS sent, but no ACK covers the last line yet
        worker.ack(1, 0, ((sid, 17),))
        await task
        worker.close()
        assert not worker.overdrawn
        assert _sent(worker) == list(zip(OFFSETS, LINES, strict=True))

    asyncio.run(main())


def test_reconnects_after_a_drop_an_error_and_a_restart_elsewhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _file(tmp_path)
    second = tmp_path / "second.txt"
    second.write_bytes(b"".join(line.upper() for line in LINES))
    closed = free_port()  # nobody listens: the round robin passes it on the way
    ports: list[int] = []

    async def main() -> None:
        other = Worker(credits=2, refusals=1)
        other_port = await other.start()
        ports.append(other_port)
        first = Worker(credits=2, script={1: (2, drop), 2: (1, error),
                                          3: (1, restart_to(other_port))})
        port = await first.start()
        other.applied = first.applied  # one worker's durable state, as after a failover
        sources: list[RecordSource] = [FileSource(path, follow=False),
                                       FileSource(second, follow=False)]
        await _run(_feed(sources, [port, closed]))
        first.close()
        other.close()
        assert first.connections == 3 and other.connections == 1
        applied = [*first.messages, *other.messages]
        for source, lines in zip(sources, (LINES, [x.upper() for x in LINES]), strict=True):
            assert [(m.message_id, m.payload) for m in applied
                    if m.stream_id == source.stream_id] == list(zip(OFFSETS, lines, strict=True))
        assert len(other.messages) > 0  # RESTART's address, not the next in the list
        assert not other.overdrawn and not first.overdrawn

    with caplog.at_level(logging.INFO, logger="ambrosia_services.connectors.clients.feed"):
        asyncio.run(main())
    mine = [r for r in caplog.records if r.name == "ambrosia_services.connectors.clients.feed"]
    assert all(r.exc_info is None and r.levelno == logging.INFO for r in mine)
    text = "\n".join(r.getMessage() for r in mine)
    assert text.count("connected to") == 4
    assert "the worker sent ERROR: scripted failure" in text
    assert f"RESTART to 127.0.0.1:{ports[0]}" in text
    assert f"cannot connect to 127.0.0.1:{closed}" in text
    assert "held elsewhere" in text
    # Each connection that ended had opened a stream (or named where to go): the back-off
    # starts again at its floor (0.01 s), whatever failed before it.
    waits = [float(w) for w in re.findall(r"reconnecting in ([0-9.]+) s", text)]
    assert len(waits) == 3 and all(w <= 0.01 for w in waits), waits


def test_tails_a_growing_file(tmp_path: Path) -> None:
    path = _file(tmp_path, LINES[:2])

    async def main() -> None:
        worker = Worker()
        port = await worker.start()
        task = asyncio.ensure_future(
            _feed([FileSource(path)], [port], poll_interval=0.02).run()
        )
        await until(lambda: len(worker.messages) == 2, "two MESSAGEs")
        with path.open("ab") as f:
            f.write(b"cc")  # a line without its newline yet: not sent
            f.flush()
            await asyncio.sleep(0.3)
            assert len(worker.messages) == 2
            f.write(b"c\nd\n")
        await until(lambda: len(worker.messages) == 4, "four MESSAGEs")
        task.cancel()
        worker.close()
        assert _sent(worker) == list(zip(OFFSETS[:4], LINES[:4], strict=True))

    asyncio.run(main())


def test_an_iterator_stream_sends_unacknowledged_records_again(tmp_path: Path) -> None:
    records: list[tuple[int, bytes] | tuple[int, bytes, bytes]] = [
        (10, b"x"), (20, b"y", b"k"), (30, b"z")
    ]

    async def main() -> None:
        # The first connection drops after record 20 arrives, before it is applied.
        worker = Worker(applied={7: 10}, script={1: (1, drop)}, apply_before_drop=False)
        port = await worker.start()
        await _run(_feed([IteratorSource(records, name="it", stream_id=7)], [port]))
        worker.close()
        assert [(m.message_id, m.payload, m.key) for m in worker.messages] == [
            (20, b"y", b"k"), (30, b"z", b"")
        ]
        assert [e.message_id for n, e in worker.events if isinstance(e, Message)] == [20, 20, 30]

    asyncio.run(main())


def test_the_command_line_with_once_ends_after_the_covering_ack(tmp_path: Path) -> None:
    path = _file(tmp_path)

    async def main() -> None:
        worker = Worker(auto_ack=False)
        port = await worker.start()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ambrosia_services.connectors.clients.feed",
            "--connect", f"127.0.0.1:{port}", "--once", str(path), cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(200):
            if any(isinstance(e, EosMessage) for _n, e in worker.events):
                break
            await asyncio.sleep(0.05)
        sid = worker.messages[0].stream_id
        worker.ack(1, 1, ((sid, 11),))  # covers "eeeee\n", not "f\n" at 17
        await asyncio.sleep(0.3)
        assert proc.returncode is None
        worker.ack(1, 1, ((sid, 17),))
        _out, err = await asyncio.wait_for(proc.communicate(), 20)
        worker.close()
        assert proc.returncode == 0, err
        assert _sent(worker) == list(zip(OFFSETS, LINES, strict=True))
        assert b"every stream is done" in err and b"Traceback" not in err

    asyncio.run(main())


def test_a_worker_nobody_runs_is_said_once_then_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each attempt used to be one log line: a feed started before its coordinator
    printed a line every few milliseconds at first, and one per back-off for ever."""
    closed = free_port()
    path = _file(tmp_path, LINES[:2])
    feed = Feed([FileSource(path, follow=False)], [Address("127.0.0.1", closed)],
                backoff_base=0.0005, backoff_cap=0.001, rng=random.Random(3))

    def cannot_connect() -> list[str]:
        return [r.getMessage() for r in caplog.records if "cannot connect" in r.getMessage()]

    async def main() -> None:
        task = asyncio.ensure_future(feed.run())
        await until(lambda: len(cannot_connect()) >= 2, "the 10th attempt said")
        await asyncio.sleep(1.0)  # hundreds of attempts more
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.INFO, logger="ambrosia_services.connectors.clients.feed"):
        asyncio.run(main())
    said = cannot_connect()
    assert said[0].startswith(f"cannot connect to 127.0.0.1:{closed} (")
    assert said[0].endswith("); retrying with back-off up to 0.001 s")
    assert said[1].endswith("(10 attempts in a row); retrying with back-off up to 0.001 s")
    assert 2 <= len(said) <= 4  # 1st, 10th, 100th, perhaps 1000th


def test_several_lines_per_message_resume_after_the_last_line_applied(tmp_path: Path) -> None:
    """With ``message_bytes``, a MESSAGE holds whole lines and its id is its last line's
    start, so a point of reference names a line either way and resuming skips it."""
    from ambrosia_services.connectors.clients.sources import FileSource as Lines

    path = tmp_path / "many.txt"
    text = b"".join(b"line %03d\n" % i for i in range(100))  # 9 bytes a line
    path.write_bytes(text + b"no newline")
    source = Lines(path, follow=False, message_bytes=40)
    source.resume(None)
    records = []
    while (r := source.next_record()) is not None:
        records.append(r)
    assert b"".join(r.payload for r in records) == text + b"no newline"
    assert [len(r.payload) for r in records[:3]] == [36, 36, 36]  # 4 whole lines of 9
    for r in records[:-1]:
        assert r.payload.endswith(b"\n") and r.message_id == text.index(r.payload[-9:])
    assert records[-1].payload == b"no newline" and records[-1].message_id == len(text)
    ids = [r.message_id for r in records]
    assert ids == sorted(set(ids))
    again = Lines(path, follow=False, message_bytes=40)
    again.resume(records[2].message_id)  # everything through the 3rd message applied
    rest = []
    while (r := again.next_record()) is not None:
        rest.append(r)
    assert b"".join(r.payload for r in rest) == text[108:] + b"no newline"
    mid = Lines(path, follow=False, message_bytes=40)
    mid.resume(9 * 5)  # a point of reference inside a message (a line per message before)
    assert mid.next_record().payload.startswith(b"line 006\n")  # type: ignore[union-attr]
    tail = Lines(path, follow=True, message_bytes=40)  # a tailed file: the last line waits
    tail.resume(records[-2].message_id)
    assert tail.next_record() is None


def test_a_plain_feed_at_a_tls_listener_stops_in_one_line(tmp_path: Path) -> None:
    """It used to loop "closed by the worker; reconnecting" for ever while only the
    listener said that the peer does not speak TLS."""
    path = _file(tmp_path)
    ours, _stranger, _expired = make_pki(tmp_path / "pki")
    refused: list[str] = []

    async def main() -> None:
        async def never(_r: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
            raise AssertionError("no plain peer gets past the handshake")

        server = await ours.tls().start_server(never, "127.0.0.1", 0, refused=refused.append)
        port = server.sockets[0].getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.services.tuned", FEED, f"{FEED}.BACKOFF_CAP=0.05", "--",
            "--connect", f"127.0.0.1:{port}", "--once", str(path),
            cwd=ROOT, stderr=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("AMBROSIA_TLS_")},
        )
        try:
            _out, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:  # it loops: not left behind
                proc.kill()
                await proc.wait()
            server.close()
        text = err.decode()
        assert proc.returncode == 1, text
        last = text.strip().splitlines()[-1]
        assert last == (f"ambrosia-feed: the worker at 127.0.0.1:{port} speaks TLS (it closed "
                        "our plain connection unanswered, and answered a TLS hello): start the "
                        "feed with --tls-cert, --tls-key and --tls-ca (or $AMBROSIA_TLS_CERT, "
                        "_KEY, _CA)"), text
        assert "reconnecting" not in text and "Traceback" not in text, text
        assert "does not speak TLS" in refused[0]  # the feed's own connection

    asyncio.run(main())


def test_a_plain_worker_that_closes_unanswered_is_not_taken_for_tls(tmp_path: Path) -> None:
    """A plain worker closes a fresh connection unanswered while it stops: the TLS probe
    learns nothing and the feed reconnects as before."""
    path = _file(tmp_path)
    closes = 3
    answered: list[bytes] = []

    async def main() -> None:
        worker = Worker()
        port = await worker.start()

        async def stopping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal closes
            first = await reader.read(1 << 16)
            answered.append(first)
            if closes:
                closes -= 1
                writer.close()
                return
            # Then the real worker: bytes both ways, as a proxy would.
            up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
            up_w.write(first)

            async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                while data := await r.read(1 << 16):
                    w.write(data)
                w.close()

            await asyncio.gather(pump(reader, up_w), pump(up_r, writer))

        front = await asyncio.start_server(stopping, "127.0.0.1", 0)
        await _run(_feed([FileSource(path, follow=False)],
                         [front.sockets[0].getsockname()[1]]))
        front.close()
        worker.close()
        assert _sent(worker) == list(zip(OFFSETS, LINES, strict=True))

    asyncio.run(main())
    # The probe's ClientHello was among the unanswered connections, closed plainly too.
    assert any(first[:1] == b"\x16" for first in answered)
