"""Bad input from sources: each is answered with ERROR and a close (one log line, no
traceback), and afterwards a good connection still works and everything acknowledged
before is still committed."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
from ambrosia_services.connectors import Hello, Message, encode_frame

from ambrosia_core.ports import free_ports
from tests.launcher import Launcher, wait_until

from .peers import MemorySink, Source, lines
from .test_flow import expected, per_stream, start

pytestmark = pytest.mark.integration

COOKIE = b"secret"


def good_round(port: int, first: int, last: int) -> None:
    """A good source resumes stream 1 where the state says and is ACKed up to ``last``."""
    src = Source(port, cookie=COOKIE)
    src.hello()
    assert src.notify(1, "one").point_of_reference == first - 1
    src.send(*lines(1, range(first, last + 1)))
    src.wait_acked(1, last)
    src.close()


def test_bad_sources_get_error_and_a_close_and_lose_nothing(launcher: Launcher,
                                                            tmp_path: Path) -> None:
    sink = MemorySink(cookie=COOKIE)
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port, cookie="secret", max_frame_size=4096)
    src = Source(port, cookie=COOKIE)
    src.hello()
    src.notify(1, "one")
    src.send(*lines(1, range(1, 11)))
    src.wait_acked(1, 10)
    src.close()
    reasons = []

    bad = Source(port, cookie=b"wrong")
    bad.send(Hello("0.0.1", b"wrong", "t", "t"))
    reasons.append(bad.error_reply())
    good_round(port, 11, 12)

    bad = Source(port, cookie=COOKIE, version="0.0.2")
    bad.send(Hello("0.0.2", COOKIE, "t", "t"))
    reasons.append(bad.error_reply())
    good_round(port, 13, 14)

    bad = Source(port, cookie=COOKIE)
    bad.hello()
    bad.raw(encode_frame(Message(9, 1, b"never notified\n")))
    reasons.append(bad.error_reply())
    good_round(port, 15, 16)

    bad = Source(port, cookie=COOKIE)
    bad.hello()
    bad.raw(struct.pack(">IB", 100_000, 5) + b"\0" * 100)  # over max_frame_size
    reasons.append(bad.error_reply())
    good_round(port, 17, 18)

    holder = Source(port, cookie=COOKIE)
    holder.hello()
    assert holder.notify(2, "two").success
    rival = Source(port, cookie=COOKIE)
    rival.hello()
    refused = rival.notify(2, "two")
    assert not refused.success
    holder.send(*lines(2, [1]))
    holder.wait_acked(2, 1)
    holder.raw(encode_frame(Message(2, 1, b"s2 line 1 again\n")))  # id did not rise
    reasons.append(holder.error_reply())
    rival.close()
    good_round(port, 19, 20)

    cut = Source(port, cookie=COOKIE)
    cut.hello()
    cut.notify(3, "three")
    frame = encode_frame(lines(3, [1])[0])
    cut.raw(frame[:len(frame) // 2])
    cut.sock.shutdown(socket.SHUT_WR)  # stops mid-frame
    reasons.append(cut.error_reply())
    good_round(port, 21, 22)

    assert all(reasons), reasons
    for word, reason in zip(["cookie", "version", "notif", "4096", "rise", "frame"],
                            reasons, strict=True):
        assert word in reason.lower(), (word, reason)
    want = {1: expected(1, 22), 2: expected(2, 1)}
    wait_until(lambda: per_stream(sink.committed_bytes) == want, "every stream committed", 30)
    assert not sink.violations
    assert not any("Traceback" in line for line in p.lines)
    assert sum("; closed" in line for line in p.lines) == len(reasons)
    p.stop()


def test_silent_and_half_sent_sources_are_closed_in_time_and_their_number_is_bounded(
        launcher: Launcher, tmp_path: Path) -> None:
    sink = MemorySink(cookie=COOKIE)
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port, cookie="secret", **{"tuning.handshake_seconds": 1.0},
              max_sources=3)
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    half = Source(port, cookie=COOKIE)
    half.hello()
    half.notify(1, "one")
    frame = encode_frame(lines(1, [1])[0])
    half.raw(frame[:len(frame) // 2])  # and nothing more
    # Three connections held: a fourth is refused at once, with ERROR.
    extra = Source(port, cookie=COOKIE)
    assert "too many connections" in extra.error_reply()
    p.wait_for("refused: 3 sources are connected (max_sources)")
    for s in silent:  # closed after their second of silence
        assert s.recv(1) == b""
        s.close()
    p.wait_for("no HELLO within 1 s; closed", count=2)
    p.wait_for("the rest of a frame not sent within 1 s; closed")
    # A source idle between frames is left alone; a good one streams as ever.
    idle = Source(port, cookie=COOKIE)
    idle.hello()
    idle.notify(2, "two")
    good = Source(port, cookie=COOKIE)
    good.hello()
    good.notify(1, "one")
    good.send(*lines(1, range(1, 6)))
    good.wait_acked(1, 5)
    good.close()
    idle.send(*lines(2, [1]))
    idle.wait_acked(2, 1)  # 1 s and more after its NOTIFY
    wait_until(lambda: per_stream(sink.committed_bytes) == {1: expected(1, 5),
                                                            2: expected(2, 1)},
               "both streams committed", 30)
    assert not any("Traceback" in line for line in p.lines)
    idle.close()
    p.stop()
