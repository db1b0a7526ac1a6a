"""The 2PC file sink as a process on 127.0.0.1, driven by a scripted coordinator:
exact committed bytes, its votes, aborts, duplicates, a prepared transaction across a
kill -9, and bad input answered with ERROR and a close."""

from __future__ import annotations

import signal
import socket
import ssl
import time
from pathlib import Path

import pytest
from ambrosia_services.connectors import (
    SINK_VERSION,
    ErrorFrame,
    FrameReader,
    Hello,
    Notify,
    Ok,
    Phase2,
    decode_frame,
    encode_frame,
    twopc_message,
)

from ambrosia_core.wire import NEED_DATA

from ....pki import Pki, make_pki
from .helpers import SinkClient, SinkProcess


@pytest.fixture
def sink(tmp_path: Path):
    s = SinkProcess(tmp_path / "out", tmp_path / "sink.log", cookie="")
    yield s
    s.kill()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pki, Pki, Pki]:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
def test_commits_exact_bytes_and_votes_as_the_rules_say(tmp_path: Path, pki,  # type: ignore[no-untyped-def]
                                                        secure: bool) -> None:
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log",
                       extra=pki[0].args() if secure else ())
    try:
        _commits_exact_bytes(sink, pki[0].tls().client if secure else None)
    finally:
        sink.kill()


def test_a_sink_over_tls_refuses_a_strange_certificate_and_plain_tcp(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                    pki) -> None:
    ours, stranger, _ = pki
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log", extra=ours.args())
    try:
        client = stranger.tls().client
        client.load_verify_locations(cafile=str(ours.ca))
        with pytest.raises(OSError):
            SinkClient(sink.port, tls=client).handshake()
        logged = sink.wait_logged("refused a connection")
        assert "failed: its certificate is not signed by a CA in --tls-ca" in logged
        with pytest.raises(OSError):
            SinkClient(sink.port).handshake()
        assert "does not speak TLS" in sink.wait_logged("does not speak TLS")
        assert not (tmp_path / "out" / "committed").read_bytes()
    finally:
        sink.kill()


def _commits_exact_bytes(sink: SinkProcess, tls: ssl.SSLContext | None) -> None:
    c = SinkClient(sink.port, tls=tls)
    c.handshake()
    assert c.list_uncommitted() == ()
    assert c.notify() == 0
    c.data(0, b"ab\n")
    c.data(3, b"cd\n")
    assert c.phase1("t1", 0, 6)
    c.phase2("t1", True)
    c.sync()
    assert sink.committed() == b"ab\ncd\n"
    c.data(6, b"ef\n")
    c.sync()
    assert sink.committed() == b"ab\ncd\n"  # written, not committed: never visible
    assert not c.phase1("t2", 3, 9)  # start is not the committed offset
    c.phase2("t2", False)
    assert c.reopen() == 6  # the abort dropped "ef\n"
    c.data(6, b"EF\n")
    assert not c.phase1("t3", 6, 10)  # ends beyond the bytes written
    c.phase2("t3", False)
    assert c.reopen() == 6
    c.data(6, b"gh\n")
    c.data(9, b"ij\n")
    assert c.phase1("t4", 6, 9)  # a commit may leave written bytes after its range
    c.phase2("t4", True)
    assert c.phase1("t5", 9, 12)
    c.phase2("t5", True)
    c.sync()
    assert sink.committed() == b"ab\ncd\ngh\nij\n"
    assert sorted(p.name for p in sink.directory.iterdir()) == ["committed", "lock", "txnlog"]
    assert c.reopen() == 12
    c.data(9, b"ij\n")  # a duplicate (below the output offset): ERROR and close
    reply = c.recv()
    assert type(reply) is ErrorFrame and "duplicate" in reply.reason
    assert c.sock.recv(1) == b""
    assert sink.committed() == b"ab\ncd\ngh\nij\n"


def test_a_skipped_offset_makes_the_next_transaction_vote_no(sink: SinkProcess) -> None:
    c = SinkClient(sink.port)
    c.handshake()
    assert c.notify() == 0
    c.data(0, b"a\n")
    c.data(5, b"lost some\n")
    c.data(15, b"more\n")
    assert not c.phase1("t1", 0, 2)
    c.phase2("t1", False)
    assert c.reopen() == 0
    c.data(0, b"b\n")
    assert c.phase1("t2", 0, 2)
    c.phase2("t2", True)
    c.sync()
    assert sink.committed() == b"b\n"


def test_a_prepared_transaction_survives_kill9_and_unprepared_bytes_do_not(
    tmp_path: Path,
) -> None:
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log")
    c = SinkClient(sink.port)
    c.handshake()
    c.notify()
    c.data(0, b"one\n")
    c.data(4, b"two\n")
    assert c.phase1("t1", 0, 8)
    c.phase2("t1", True)
    c.data(8, b"three\n")
    c.data(14, b"four\n")
    assert c.phase1("t2", 8, 14)
    sink.kill()
    assert sink.committed() == b"one\ntwo\n"
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log")
    try:
        c = SinkClient(sink.port)
        c.handshake()
        assert c.list_uncommitted() == ("t2",)
        assert c.notify() == 14  # committed + prepared; "four\n" was never prepared
        assert sink.committed() == b"one\ntwo\n"
        c.phase2("t2", True)
        c.phase2("t2", True)  # a repeated commit changes nothing
        assert c.list_uncommitted() == ()
        assert sink.committed() == b"one\ntwo\nthree\n"
    finally:
        sink.kill()


def _answer(port: int, data: bytes) -> list[object]:
    """Send raw ``data``; every frame the sink sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(1 << 16):
            got += chunk
    reader = FrameReader()
    reader.receive_data(got)
    frames: list[object] = []
    while (raw := reader.next_frame()) is not NEED_DATA:
        frames.append(decode_frame(raw.tag, raw.body))  # type: ignore[union-attr]
    assert reader.at_boundary
    return frames


def test_bad_input_gets_error_and_close_and_committed_data_stays(tmp_path: Path) -> None:
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log", cookie="secret")
    try:
        c = SinkClient(sink.port, cookie=b"secret")
        c.handshake()
        c.notify()
        c.data(0, b"kept\n")
        assert c.phase1("t1", 0, 5)
        c.phase2("t1", True)
        c.sync()
        # While this connection lives, one with the wrong cookie is refused, and the
        # first goes on undisturbed.
        (second,) = _answer(sink.port, encode_frame(Hello(SINK_VERSION, b"x", "p", "i")))
        assert type(second) is ErrorFrame and "wrong cookie" in second.reason
        c.sync()
        c.close()
        hello = encode_frame(Hello(SINK_VERSION, b"secret", "p", "i"))
        cases = {
            "wrong cookie": encode_frame(Hello(SINK_VERSION, b"nope", "p", "i")),
            "wrong version": encode_frame(Hello("0.0.1", b"secret", "p", "i")),
            "stream 2": hello + encode_frame(Notify(2, "other", 0)),
            "oversized": hello + b"\x7f\xff\xff\xff\x05" + b"x" * 100,
            "garbage": b"\x00\x00\x00\x03\xee\x01\x02",
            "commit unprepared": hello + encode_frame(twopc_message(Phase2("nope", True))),
        }
        expected = {
            "wrong cookie": "wrong cookie",
            "wrong version": "unexpected protocol version",
            "stream 2": "stream 1 only",
            "oversized": "over the 4194304-byte limit",
            "garbage": "unknown",
            "commit unprepared": "not prepared",
        }
        for name, data in cases.items():
            frames = _answer(sink.port, data)
            assert type(frames[-1]) is ErrorFrame, (name, frames)
            assert expected[name] in frames[-1].reason.lower(), (name, frames[-1])
            assert frames[:-1] in ([], [Ok(500)]), (name, frames)
        assert sink.committed() == b"kept\n"
        c = SinkClient(sink.port, cookie=b"secret")
        c.handshake()
        assert c.notify() == 5
    finally:
        sink.kill()


def test_an_ordinary_stop_with_a_connection_open_is_quiet(sink: SinkProcess) -> None:
    c = SinkClient(sink.port)
    c.handshake()
    c.notify()
    sink.proc.send_signal(signal.SIGTERM)
    assert sink.proc.wait(10) == 0
    log = sink.log.read_text()
    assert "ended: the sink is stopping" in log
    assert "Traceback" not in log, log
    c.close()


def test_a_silent_stranger_never_holds_the_sink_and_a_newer_link_takes_over(
        tmp_path: Path) -> None:
    """An idle TCP connection used to block every commit for as long as it stayed. Now
    it holds nothing until its HELLO, and is closed when none comes in time; a second
    accepted link replaces the first (a coordinator that reconnected is the live one)."""
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log", cookie="secret",
                       handshake_seconds=1)
    stranger = socket.create_connection(("127.0.0.1", sink.port), timeout=10)
    try:
        first = SinkClient(sink.port, cookie=b"secret")
        first.handshake()  # at once: the stranger holds nothing
        first.notify()
        first.data(0, b"one\n")
        assert first.phase1("t1", 0, 4)
        first.phase2("t1", True)
        first.sync()
        assert stranger.recv(1) == b""  # closed after its second of silence
        second = SinkClient(sink.port, cookie=b"secret")
        second.handshake()
        assert second.notify() == 4
        with pytest.raises(ConnectionResetError):
            first.sync()  # replaced: closed by the sink
        second.data(4, b"two\n")
        assert second.phase1("t2", 4, 8)
        second.phase2("t2", True)
        second.sync()
        assert sink.committed() == b"one\ntwo\n"
        log = sink.wait_logged("ended: no HELLO within 1 s")
        assert "a new connection from" in log and "replaces the one from" in log
        assert "Traceback" not in log
    finally:
        stranger.close()
        sink.kill()


def test_a_linked_peer_that_stops_mid_frame_is_closed_and_idle_ones_are_not(
        tmp_path: Path) -> None:
    sink = SinkProcess(tmp_path / "out", tmp_path / "sink.log", handshake_seconds=1)
    try:
        idle = SinkClient(sink.port)
        idle.handshake()
        idle.notify()
        time.sleep(1.5)  # idle between frames: kept
        idle.data(0, b"one\n")
        assert idle.phase1("t1", 0, 4)
        idle.phase2("t1", True)
        idle.sync()
        idle.sock.sendall(b"\x00\x00")  # two bytes of a frame's length, then nothing
        assert idle.sock.recv(1) == b""  # closed after a second without the rest
        log = sink.wait_logged("ended: the rest of a frame not sent within 1 s")
        assert "Traceback" not in log
        assert sink.committed() == b"one\n"
    finally:
        sink.kill()
