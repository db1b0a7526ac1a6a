"""A running coordinator's ports under hostile input, over real sockets.

Every case starts a real coordinator for a registered instance and a raw binding that
does a real first start and logs a few self-calls (impulse -> self-call -> ack chains),
then misbehaves on one port. The coordinator must end the bad connection with a typed
error: on the binding's receive port the protocol says the coordinator stops (one line on
stderr, exit code 2 for malformed bytes, 1 for a binding that went away) and a restart
recovers every record logged before, byte for byte; on the link port it refuses the
stranger, logs it, and goes on serving its binding.
"""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from ambrosia_ic.links import LINK_MAGIC

from ambrosia_core.wire import (
    BecomingPrimary,
    Checkpoint,
    OutgoingRpc,
    RpcType,
    TrimTo,
    encode_zz32,
)
from tests.ic.conftest import Harness
from tests.ic.rawbinding import Driver
from tests.launcher import wait_until

pytestmark = pytest.mark.integration

NAME = "fuzzed"
EXIT_BINDING_LOST = 1
EXIT_MALFORMED = 2


def _chain(d: Driver, start: int, stop: int) -> None:
    """Impulses one at a time: each makes a self-call, which makes an acknowledgement."""
    for k in range(start, stop):
        d.impulse(k)
        wait_until(lambda k=k: len(d.snapshot()["acked"]) == k + 1, f"ack {k}")


def _live(harness: Harness, chain: int = 3) -> tuple[subprocess.Popen[str], Driver]:
    harness.register(NAME)
    proc = harness.start(NAME)
    d = harness.drive(NAME)
    wait_until(d.primary.is_set, "primary")
    _chain(d, 0, chain)
    return proc, d


def _recovers_everything(harness: Harness, before: Driver) -> Driver:
    """Restart; the replay must hold every record logged before, byte for byte, and the
    instance must go on working."""
    harness.start(NAME)
    d = harness.drive(NAME)
    wait_until(d.primary.is_set, "primary after recovery")
    assert d.records == before.records
    assert d.snapshot() == before.snapshot()
    n = len(before.snapshot()["acked"])
    _chain(d, n, n + 2)
    assert d.snapshot()["acked"] == [f"{NAME}:{k}" for k in range(n + 2)]
    return d


def _one_error_line(harness: Harness, proc: subprocess.Popen[str], starts: str) -> str:
    lines = harness.stderr_of(proc).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ambrosia-ic: {NAME}: {starts}"), lines
    return lines[0]


def _connect(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=30)
    except OSError:
        return None


def _closed_by_peer(s: socket.socket) -> bool:
    """Read until the coordinator closes the connection (whatever it sent first)."""
    while True:
        try:
            data = s.recv(1 << 16)
        except ConnectionResetError:
            return True
        if not data:
            return True


@contextmanager
def _stranger(port: int) -> Iterator[socket.socket]:
    s = wait_until(lambda: _connect(port), "the port to accept")
    try:
        yield s
    finally:
        s.close()


# ---------------------------------------------------------------- the receive port
MALFORMED = {
    # A size varint of five bytes whose value overflows 32 bits ("4 GiB and more").
    "zz32 size overflows": b"\xff\xff\xff\xff\x7f" + b"\x00" * 16,
    # The largest zz32 there is, far over the 64 MiB frame bound.
    "max zz32 size over the frame bound": encode_zz32(2**31 - 1) + b"\x01\x02\x03",
    "negative size": encode_zz32(-5) + b"\x01",
    "an HTTP request": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "unknown message type": b"\x06\x63garbage",
    "a message only coordinators send (TrimTo)": TrimTo(7).encode(),
    "BecomingPrimary from a binding": BecomingPrimary().encode(),
    "a Checkpoint nobody asked for": Checkpoint(4).encode() + b"ckpt",
    # Random junk behind a size that cannot be (random bytes alone could by chance be a
    # legal message, a TakeCheckpoint say, which the coordinator rightly obeys).
    "random junk": None,
}


@pytest.mark.parametrize("garbage", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_bytes_on_the_receive_port_stop_the_coordinator_losing_nothing(
        harness: Harness, garbage: bytes | None) -> None:
    if garbage is None:
        seed = random.SystemRandom().randrange(1 << 32)
        print(f"random junk seed {seed}")  # shown if the test fails
        garbage = encode_zz32(-1) + random.Random(seed).randbytes(200)
    proc, d1 = _live(harness)
    d1.b.send_raw(garbage)
    assert proc.wait(30) == EXIT_MALFORMED
    _one_error_line(harness, proc, "binding sent malformed bytes:")
    d1.thread.join(30)
    assert d1.b.closed and d1.error is None
    _recovers_everything(harness, d1)


def test_a_half_written_message_then_disconnect_logs_nothing_of_it(harness: Harness) -> None:
    proc, d1 = _live(harness)
    call = OutgoingRpc("", 5, RpcType.IMPULSE, b"never-whole").encode()
    d1.b.send_raw(call[: len(call) // 2])
    time.sleep(0.2)  # let it arrive on its own before the close
    d1.b.close()
    assert proc.wait(30) == EXIT_BINDING_LOST
    _one_error_line(harness, proc, "the binding closed its connection")
    d2 = _recovers_everything(harness, d1)
    assert all(b"never-whole" not in r for r in d2.records)


def test_a_binding_that_writes_one_byte_at_a_time_is_served(harness: Harness) -> None:
    """A slow binding is not cut off (the coordinator has no idle timeout on its binding,
    as the protocol has none): bytes that trickle in still make whole messages, and the
    link port keeps answering meanwhile."""
    proc, d = _live(harness)
    call = OutgoingRpc("", 5, RpcType.IMPULSE, b"3").encode()
    port = harness.reg(NAME).ic_port
    for i, byte in enumerate(call):
        d.b.send_raw(bytes([byte]))
        time.sleep(0.15)
        if i == len(call) // 2:
            with _stranger(port) as s:  # the coordinator still answers on another port
                assert s.recv(8) == LINK_MAGIC
        assert proc.poll() is None
    wait_until(lambda: len(d.snapshot()["acked"]) == 4, "the trickled call's ack")
    assert d.snapshot()["sent"][-1] == f"{NAME}:3"


def test_a_second_binding_is_refused_while_one_is_attached(harness: Harness) -> None:
    proc, d = _live(harness)
    reg = harness.reg(NAME)
    for port in (reg.receive_port, reg.send_port):
        s = _connect(port)
        if s is not None:  # the coordinator may have stopped listening altogether
            with s:
                with suppress(OSError):
                    s.sendall(OutgoingRpc("", 5, RpcType.IMPULSE, b"99").encode())
                assert _closed_by_peer(s)
    _chain(d, 3, 5)
    assert "fuzzed:99" not in d.snapshot()["sent"]
    assert proc.poll() is None


def test_a_stranger_holding_the_receive_port_is_dropped_and_the_binding_served(
        harness: Harness) -> None:
    harness.register(NAME)
    proc = harness.start(NAME)
    reg = harness.reg(NAME)
    with _stranger(reg.receive_port) as s:
        assert _closed_by_peer(s)  # no partner on the send port followed it
    d = harness.drive(NAME)
    wait_until(d.primary.is_set, "primary")
    _chain(d, 0, 2)
    assert proc.poll() is None
    line = _one_error_line(harness, proc, "dropped a connection to the receive port from ")
    assert line.endswith("no connection to the send port followed within 5 s")


# ---------------------------------------------------------------- the link port
LINK_GARBAGE = {
    "an HTTP request": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "a name length that overflows zz32": b"\xff\xff\xff\xff\x7f",
    "a name of 2 GiB": encode_zz32(2**31 - 1) + b"x" * 64,
    "a negative name length": encode_zz32(-3) + b"abc",
    "names that are not UTF-8": b"\x04\xff\xfe" + b"\x04\xff\xfe" + bytes(48),
    "a wrong proof": encode_zz32(1) + b"x" + encode_zz32(len(NAME)) + NAME.encode()
                     + bytes(48),
    "a log record before any handshake": b"\x01" * 64,
}


@pytest.mark.parametrize("garbage", list(LINK_GARBAGE.values()), ids=list(LINK_GARBAGE))
def test_a_stranger_on_the_link_port_is_refused_and_logged(
        harness: Harness, garbage: bytes) -> None:
    proc, d = _live(harness)
    with _stranger(harness.reg(NAME).ic_port) as s:
        assert s.recv(8) == LINK_MAGIC
        s.sendall(garbage)
        assert _closed_by_peer(s)
    wait_until(lambda: "refused a link" in harness.stderr_of(proc), "the refusal logged")
    refusals = [ln for ln in harness.stderr_of(proc).splitlines() if "refused a link" in ln]
    assert len(refusals) == 1 and "127.0.0.1:" in refusals[0]
    _chain(d, 3, 5)  # still serving its binding
    assert proc.poll() is None


@pytest.mark.slow
def test_a_link_handshake_that_trickles_is_cut_off_while_the_binding_is_served(
        harness: Harness) -> None:
    """One byte every half second never completes a handshake: the coordinator's
    handshake timeout (10 s) closes it; the binding is served all along."""
    proc, d = _live(harness)
    with _stranger(harness.reg(NAME).ic_port) as s:
        assert s.recv(8) == LINK_MAGIC
        s.settimeout(0.5)
        k = 3
        closed = False
        deadline = time.monotonic() + 40
        while not closed and time.monotonic() < deadline:
            try:
                s.sendall(b"\x02")
                closed = s.recv(100) == b""
            except TimeoutError:
                pass
            except OSError:
                closed = True
            _chain(d, k, k + 1)
            k += 1
        assert closed
    assert k > 4  # the binding made progress while the stranger held its connection
    wait_until(lambda: "refused a link" in harness.stderr_of(proc), "the refusal logged")
    assert proc.poll() is None
