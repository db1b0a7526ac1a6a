"""Fixtures for the partition tests: nodes in network namespaces, or one clear skip line
where namespaces cannot be made (not root, tools missing), counted in the run's summary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .net import Network, unavailable


def need_network() -> None:
    why = unavailable()
    if why is not None:
        pytest.skip(f"network partitions not run: {why}")


@pytest.fixture
def net2() -> Iterator[Network]:
    need_network()
    with Network(["a", "b"]) as net:
        yield net
