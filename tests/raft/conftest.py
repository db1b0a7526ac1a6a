"""A real three-peer ØMQ RAFT cluster (the npm ``zmq-raft`` peers) on 127.0.0.1 for the
tests of this package that use one. Tests that kill or pause a peer start it again before
they end, so the cluster is whole for the next test.

Every test that uses the cluster is in the xdist group "raft", so one worker runs them
one after the other against one cluster, which stops when the last of them ends (package
scope). An idle cluster costs about 1.25 s of CPU every 30 s (heartbeats of three node
processes): a cluster per worker held to the end of a run cost up to a minute of CPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_ic.raft.cluster import LocalCluster

from tests.ic.conftest import harness  # noqa: F401 - a fixture, used by name

SECRET = "ambrosia-tests"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("raft"))


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("raft"), 3, SECRET)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def restart_missing(c: LocalCluster) -> None:
    """Start every peer a test killed, and wait until the cluster has a leader."""
    for p in c.peers:
        if p.id not in c.procs:
            c.start_peer(p.id)
    c.wait_for_leader()


@pytest.fixture
def whole_cluster(cluster: LocalCluster) -> Iterator[LocalCluster]:
    yield cluster
    restart_missing(cluster)


def data_dir(c: LocalCluster) -> Path:
    return c.dir / "data"
