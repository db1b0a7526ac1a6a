"""Partitions between the coordinators of an active/active replica set and their caller,
each on its own network namespace, with the log in a Raft cluster (on a node of its own)
and in files (one directory all nodes see). While C streams calls to S: the primary is
cut off from the cluster (fully, one way, flapping), the caller from the primary, and
links are slowed, made lossy and reordered. Every call is applied exactly once and in
order, every answer reaches C; a primary cut off stops acknowledging before a new one
takes over; after healing there is one primary."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import need_network
from .net import Network
from .replicas import CALLER, RAFT, REPLICAS, ReplicaSet, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _replica_set(tmp_path: Path, store: str) -> Iterator[ReplicaSet]:
    need_network()
    nodes = [*REPLICAS, CALLER] + ([RAFT] if store == "raft" else [])
    with Network(nodes) as net:
        rs = ReplicaSet(net, tmp_path, store)
        try:
            rs.start()
            rs.start_pump()
            yield rs
        finally:
            rs.close()


@pytest.fixture
def raft_set(tmp_path: Path) -> Iterator[ReplicaSet]:
    yield from _replica_set(tmp_path, "raft")


@pytest.fixture
def files_set(tmp_path: Path) -> Iterator[ReplicaSet]:
    yield from _replica_set(tmp_path, "files")


def _others(node: str) -> list[str]:
    return [n for n in (*REPLICAS, RAFT) if n != node]


# One-way cuts go to `make chaos`; the full cut stays in make test.
@pytest.mark.parametrize("how", ["full", pytest.param("one-way-out", marks=pytest.mark.chaos),
                                 pytest.param("one-way-in", marks=pytest.mark.chaos)])
def test_a_primary_cut_off_from_the_cluster_hands_over(raft_set: ReplicaSet, how: str) -> None:
    rs = raft_set
    time.sleep(0.5)
    old = "r0"
    if how == "full":
        rs.net.cut([old], _others(old))
    elif how == "one-way-out":  # what it sends is lost; it still hears the cluster
        rs.net.cut([old], _others(old), one_way=True)
    else:  # it is not heard back: its appends may land, their confirmations do not
        rs.net.cut(_others(old), [old], one_way=True)
    new = rs.wait_new_primary(old)
    time.sleep(0.5)  # the old primary, still cut off, while the new one works
    rs.net.heal()
    assert rs.wait_one_primary() == new
    # The old one learns of the newer epoch and rejoins as a standby, in the same process.
    wait_for(lambda: "rejoining as a standby" in rs.said(old), f"{old} rejoining", 30)
    assert rs.procs[old].poll() is None
    rs.stop_pump()
    rs.check_handover(old, new)
    assert rs.check_exactly_once(new) > 100


# `make chaos`: a network cut stays in make test (the primary cut off from the cluster,
# above); the simulator cuts and heals links in every run.
@pytest.mark.chaos
def test_a_flapping_cut_leaves_one_primary(raft_set: ReplicaSet) -> None:
    rs = raft_set
    rng = random.Random()
    seed = rng.randrange(1 << 32)
    rng.seed(seed)
    for _ in range(6):
        victim = rng.choice(rs.primaries() or ["r0"])
        rs.net.cut([victim], _others(victim), one_way=rng.random() < 0.3)
        time.sleep(rng.uniform(0.2, 1.6))
        rs.net.heal()
        time.sleep(rng.uniform(0.1, 0.6))
    primary = rs.wait_one_primary()
    rs.stop_pump()
    assert rs.check_exactly_once(primary) > 100, seed


@pytest.mark.chaos  # `make chaos`: the cut-off primary and the flapping cut stay in make test
def test_the_caller_cut_from_a_files_primary_resumes_exactly_once(files_set: ReplicaSet) -> None:
    """With files, no cut parts a replica from the log (one file system): the primary
    keeps its lease, and cuts between the caller and it only delay calls and answers."""
    rs = files_set
    time.sleep(0.3)
    rs.net.cut([CALLER], ["r0"])
    time.sleep(1.5)
    rs.net.heal()
    rs.net.cut([CALLER], ["r0"], one_way=True)
    time.sleep(1.0)
    rs.net.heal()
    rs.net.cut(["r0"], [CALLER], one_way=True)
    time.sleep(1.0)
    rs.net.heal()
    for _ in range(5):
        rs.net.cut([CALLER], ["r0"])
        time.sleep(0.2)
        rs.net.heal()
        time.sleep(0.2)
    assert rs.wait_one_primary() == "r0"
    rs.stop_pump()
    assert rs.check_exactly_once("r0") > 100


@pytest.mark.chaos  # `make chaos`: the simulator's drops and cuts cover link faults in make test
@pytest.mark.parametrize("store", ["files", "raft"])
def test_slow_lossy_reordering_links(tmp_path: Path, store: str) -> None:
    for rs in _replica_set(tmp_path, store):
        net = rs.net
        far = [RAFT] if store == "raft" else []
        for a, b in [(CALLER, "r0"), ("r0", CALLER), *[("r0", x) for x in far],
                     *[(x, "r0") for x in far]]:
            net.shape(a, b, 0.03, jitter=0.02, reorder=0.2, seed=hash((a, b)) & 0xFFFF)
            net.lose(a, b, 0.05)
        time.sleep(4)
        for a, b in list(net.lossy):
            net.lose(a, b, 0.0)
        primary = rs.wait_one_primary()
        rs.stop_pump()
        assert rs.check_exactly_once(primary) > 50
