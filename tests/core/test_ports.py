"""Ports drawn for coordinators and tests (``ambrosia_core.ports``): from below the
ephemeral range, or from the slice ``AMBROSIA_PORTS`` gives (each parallel test worker has
its own), each free when chosen; a malformed slice is refused in one line."""

from __future__ import annotations

import itertools
import socket

import pytest

from ambrosia_core import ports
from tests.conftest import worker_ports


def test_ports_come_from_the_slice_given_distinct_and_free(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ports.PORTS_ENV, "20000-22500")
    assert ports.drawn_range() == (20000, 22500)
    seen: set[int] = set()
    for _ in range(200):
        got = ports.free_ports(3)
        assert len(set(got)) == 3 and all(20000 <= p < 22500 for p in got)
        seen.update(got)
    assert len(seen) > 300  # drawn at random over the slice, not walked from its start
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.free_ports(1)[0]))  # free when chosen


def test_without_a_slice_ports_come_from_below_the_ephemeral_range(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ports.PORTS_ENV, raising=False)
    low, high = ports.drawn_range()
    assert (low, high) == (ports.LOWEST, ports.ephemeral_range()[0])
    assert all(low <= p < high for p in ports.free_ports(5))


@pytest.mark.parametrize("value", ["20000", "b-c", "22500-20000", "0-100", "1-70000"])
def test_a_malformed_slice_is_refused_in_one_line(value: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ports.PORTS_ENV, value)
    with pytest.raises(ValueError, match=f"AMBROSIA_PORTS={value!r}: expected"):
        ports.free_ports(1)


@pytest.mark.parametrize("count", [2, 3, 4])
def test_the_parallel_workers_slices_do_not_overlap_and_each_is_wide(count: int) -> None:
    slices = [tuple(map(int, worker_ports(k, count).split("-"))) for k in range(count)]
    assert slices[0][0] == ports.LOWEST and slices[-1][1] <= ports.ephemeral_range()[0]
    for (_, end), (start, _) in itertools.pairwise(slices):
        assert end == start  # side by side, none shared
    assert all(high - low >= ports.MIN_CANDIDATES for low, high in slices)
