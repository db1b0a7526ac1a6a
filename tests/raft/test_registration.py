"""``register-instance --log-store raft://...``: stored in the registration, published in
the cluster for replicas on other machines, and a bad address refused in one line."""

from __future__ import annotations

import asyncio
import json

import pytest
from ambrosia_ic import registry
from ambrosia_ic.raft.address import RaftAddress, parse_address
from ambrosia_ic.raft.cluster import LocalCluster
from ambrosia_ic.raft.registry import fetch_registration

from ambrosia_py.errors import RegistryError
from tests.ic.conftest import Harness, free_ports


def test_addresses() -> None:
    a = parse_address("raft://127.0.0.1:7001,localhost:7002/?secret=s%20t")
    assert a == RaftAddress(("tcp://127.0.0.1:7001", "tcp://localhost:7002"), "s t")
    assert parse_address(str(a)) == a
    for bad, why in [("tcp://h:1", "not a raft:// address"), ("raft://h", "is not HOST:PORT"),
                     ("raft://h:0", "is not HOST:PORT"), ("raft://h:1?x=2", "unknown parameter")]:
        with pytest.raises(RegistryError, match=why):
            parse_address(bad)


@pytest.mark.integration
def test_register_with_a_raft_log_store(harness: Harness, cluster: LocalCluster) -> None:
    rp, sp, ip = free_ports(3)
    base = ["register-instance", "-i", "svc", "-rp", str(rp), "-sp", str(sp), "-p", str(ip),
            "-l", str(harness.logs), "-aa"]
    r = harness.cli(*base, "--log-store", "raft://127.0.0.1")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == ("ambrosia: error: log store 'raft://127.0.0.1': '127.0.0.1' is not "
                        "HOST:PORT\n")
    r = harness.cli(*base, "--log-store", cluster.address)
    assert r.returncode == 0, r.stderr
    assert f"logs {cluster.address}" in r.stdout
    reg = registry.load("svc", harness.home)
    assert reg.log_store == cluster.address
    published = asyncio.run(fetch_registration(cluster.address, "svc"))
    assert published == reg.to_json()
    # Options not given keep the registered store; '' goes back to files.
    assert harness.cli(*base).returncode == 0
    assert registry.load("svc", harness.home).log_store == cluster.address
    assert harness.cli(*base, "--log-store", "").returncode == 0
    assert registry.load("svc", harness.home).log_store == ""
    # A registration written before the option existed loads with files.
    path = harness.home / "instances" / "svc.json"
    data = json.loads(path.read_text())
    del data["log_store"]
    path.write_text(json.dumps(data))
    assert registry.load("svc", harness.home).log_store == ""
