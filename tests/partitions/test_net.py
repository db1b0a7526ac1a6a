"""The network the partition tests stand on, checked with real packets: nodes reach each
other, a cut drops packets silently (a timeout, not an error), a one-way cut only one
way, loss drops about the share asked, the shaper delays and reorders, and closing
leaves no namespace behind."""

from __future__ import annotations

import socket
import time

import pytest

from .net import Network

pytestmark = pytest.mark.integration


def _udp_pair(net: Network, src: str, dst: str) -> tuple[socket.socket, socket.socket]:
    with net.inside(dst):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((net.address(dst), 0))
        rx.settimeout(0.3)
    with net.inside(src):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.connect(rx.getsockname())
    return tx, rx


def _received(rx: socket.socket) -> list[int]:
    got = []
    try:
        while True:
            got.append(int(rx.recv(64)))
    except TimeoutError:
        return got


def _send(tx: socket.socket, n: int, gap: float = 0.0) -> None:
    for i in range(n):
        tx.send(b"%d" % i)
        if gap:
            time.sleep(gap)


def test_cuts_one_way_cuts_and_heal(net2: Network) -> None:
    ab, ab_rx = _udp_pair(net2, "a", "b")
    ba, ba_rx = _udp_pair(net2, "b", "a")
    _send(ab, 3)
    assert _received(ab_rx) == [0, 1, 2]
    net2.cut(["a"], ["b"], one_way=True)
    _send(ab, 3)
    _send(ba, 3)
    assert _received(ab_rx) == []
    assert _received(ba_rx) == [0, 1, 2]
    net2.cut(["a"], ["b"])
    _send(ba, 3)
    assert _received(ba_rx) == []
    # A TCP connect across a cut times out: the packets vanish, nobody is told.
    with net2.inside("b"):
        server = socket.create_server((net2.address("b"), 0))
    with net2.inside("a"):
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            socket.create_connection(server.getsockname(), timeout=0.5)
        assert time.monotonic() - t0 >= 0.45
    net2.heal()
    with net2.inside("a"):
        socket.create_connection(server.getsockname(), timeout=2).close()
    _send(ab, 2)
    assert _received(ab_rx) == [0, 1]


def test_loss_drops_about_the_share_asked(net2: Network) -> None:
    tx, rx = _udp_pair(net2, "a", "b")
    net2.lose("a", "b", 0.5)
    _send(tx, 400)
    got = _received(rx)
    assert 120 < len(got) < 280, len(got)
    net2.lose("a", "b", 0.0)
    _send(tx, 50)
    assert len(_received(rx)) == 50


def test_the_shaper_delays_and_reorders(net2: Network) -> None:
    with net2.inside("b"):
        server = socket.create_server((net2.address("b"), 0))
    net2.shape("a", "b", 0.08)
    with net2.inside("a"):
        t0 = time.monotonic()
        socket.create_connection(server.getsockname(), timeout=2).close()
        assert time.monotonic() - t0 >= 0.075
    net2.shape("a", "b", 0.05, jitter=0.02, reorder=0.3, seed=1)
    tx, rx = _udp_pair(net2, "a", "b")
    _send(tx, 60, gap=0.002)
    got = _received(rx)
    assert sorted(got) == list(range(60))  # delayed, none lost
    assert got != sorted(got)  # but not in order
    net2.unshape("a", "b")
    with net2.inside("a"):
        t0 = time.monotonic()
        socket.create_connection(server.getsockname(), timeout=2).close()
        assert time.monotonic() - t0 < 0.05


def test_close_leaves_nothing(tmp_path: object) -> None:
    from .net import _run, unavailable

    why = unavailable()
    if why is not None:
        pytest.skip(f"network partitions not run: {why}")
    net = Network(["a", "b"]).start()
    names = [net.namespace("a"), net.namespace("b"), net.switch]
    listed = _run("ip", "netns", "list")
    assert all(n in listed for n in names)
    net.close()
    listed = _run("ip", "netns", "list")
    assert not any(n in listed for n in names)


def test_a_fault_schedule_depends_only_on_the_seed() -> None:
    import importlib
    import sys
    from pathlib import Path

    bench = str(Path(__file__).resolve().parents[2] / "bench")
    sys.path.insert(0, bench)
    try:
        partitions = importlib.import_module("partitions")
    finally:
        sys.path.remove(bench)
    a = partitions.schedule("raft", 30, 7)
    assert a == partitions.schedule("raft", 30, 7) != partitions.schedule("raft", 30, 8)
    assert {k for k, _, _ in a} <= set(partitions.KINDS["raft"])
    files = partitions.schedule("files", 30, 7)
    # With files nothing can part a replica from the log: only the caller's faults.
    assert {k for k, _, _ in files} <= {"caller", "flap", "slow"}
    assert all(0.5 <= d <= 3.0 for _, d, _ in a + files)
