"""A real three-peer ØMQ RAFT cluster (the npm ``zmq-raft`` peers) on 127.0.0.1, one per
test worker. Tests that kill or pause a peer start it again before they end, so the
cluster is whole for the next test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_ic.raft.cluster import LocalCluster

from tests.ic.conftest import harness  # noqa: F401 - a fixture, used by name

SECRET = "ambrosia-tests"


@pytest.fixture(scope="session")
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
