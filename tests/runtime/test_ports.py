"""Free ports are drawn below the kernel's ephemeral range, so that no outgoing connection
can take one between choosing it and listening on it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from ambrosia_core import ports
from ambrosia_core.ports import ephemeral_range, free_ports


def test_ports_come_from_below_the_ephemeral_range_and_are_distinct() -> None:
    lo, _ = ephemeral_range()
    assert lo - ports.LOWEST >= ports.MIN_CANDIDATES  # this machine has room below
    chosen = [p for _ in range(20) for p in free_ports(5)]
    assert all(ports.LOWEST <= p < lo for p in chosen)
    for i in range(0, len(chosen), 5):
        assert len(set(chosen[i:i + 5])) == 5
    assert len(set(chosen)) > 50  # drawn at random, not counted up from one place
    for p in free_ports(3):  # and free: each can be listened on
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
            s.listen()


def _draws(monkeypatch: pytest.MonkeyPatch, first: list[int]) -> None:
    real = ports._draw.randrange
    queue: Iterator[int] = iter(first)
    monkeypatch.setattr(ports._draw, "randrange", lambda a, b: next(queue, None) or real(a, b))


def test_a_port_in_use_is_passed_over() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", free_ports(1)[0]))
        listening.listen()
        taken = listening.getsockname()[1]
        with pytest.MonkeyPatch.context() as mp:
            _draws(mp, [taken, taken])
            got = free_ports(2)
    assert taken not in got and len(set(got)) == 2


def test_a_port_drawn_twice_is_handed_out_once() -> None:
    p = free_ports(1)[0]
    with pytest.MonkeyPatch.context() as mp:
        _draws(mp, [p, p, p])
        got = free_ports(2)
    assert got[0] == p and got[1] != p


def test_the_kernel_chooses_where_the_ephemeral_range_leaves_no_room(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))
    monkeypatch.setattr(ports._draw, "randrange", lambda a, b: pytest.fail("drew a port"))
    got = free_ports(3)
    assert len(set(got)) == 3 and all(p > 0 for p in got)


def test_the_range_is_read_from_the_kernel(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "ip_local_port_range"
    f.write_text("40000\t50000\n")
    monkeypatch.setattr(ports, "_EPHEMERAL", f)
    assert ephemeral_range() == (40000, 50000)
    assert all(ports.LOWEST <= p < 40000 for p in free_ports(10))
    f.write_text("garbage\n")
    assert ephemeral_range() == (32768, 60999)
