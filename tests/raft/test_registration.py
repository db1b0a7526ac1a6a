"""``register-instance --log-store raft://...``: stored in the registration, published in
the cluster for replicas on other machines, and a bad address refused in one line."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ambrosia_ic import launch, registry
from ambrosia_ic.errors import RegistryError
from ambrosia_ic.logstore.registrations import fetch_registration
from ambrosia_ic.raft.cluster import LocalCluster
from ambrosia_ic.registry.raft_address import RaftAddress, parse_address

from ambrosia_core.ports import free_ports
from tests.ic.conftest import Harness


def test_addresses() -> None:
    a = parse_address("raft://127.0.0.1:7001,localhost:7002/?secret=s%20t")
    assert a == RaftAddress(("tcp://127.0.0.1:7001", "tcp://localhost:7002"), "s t")
    assert parse_address(str(a)) == a
    v6 = parse_address("raft://[::1]:7001")
    assert (v6.urls, str(v6)) == (("tcp://[::1]:7001",), "raft://[::1]:7001")
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
    assert published == {**reg.to_json(), "replicas": {}}
    assert reg.lease_ms == registry.DEFAULT_LEASE_MS == 1000
    # The lease: no option, but a registration field (a test's longer lease), within
    # bounds, and kept by a registration that changes something else.
    again = {"instance_name": "svc", "receive_port": rp, "send_port": sp, "ic_port": ip,
             "log_dir": harness.logs, "active_active": True, "log_store": cluster.address,
             "home": harness.home}
    with pytest.raises(RegistryError, match=r"^lease must be 100\.\.600000 ms, got 50$"):
        registry.register(**again, lease_ms=50)
    registry.register(**again, lease_ms=300)
    assert harness.cli(*base, "--log-store", cluster.address).returncode == 0
    doc = asyncio.run(fetch_registration(cluster.address, "svc"))
    assert doc is not None and doc["lease_ms"] == 300
    r = harness.cli(*base, "--lease-ms", "300")
    assert r.returncode == 2 and "unrecognized arguments: --lease-ms 300" in r.stderr
    # Options not given keep the registered store; '' goes back to files.
    assert harness.cli(*base).returncode == 0
    assert registry.load("svc", harness.home).log_store == cluster.address
    assert registry.load("svc", harness.home).lease_ms == 300
    assert harness.cli(*base, "--log-store", "").returncode == 0
    assert registry.load("svc", harness.home).log_store == ""
    # A registration written before the option existed loads with files.
    path = harness.home / "instances" / "svc.json"
    data = json.loads(path.read_text())
    del data["log_store"]
    del data["lease_ms"]
    del data["check"]  # nor check bytes
    path.write_text(json.dumps(data))
    assert registry.load("svc", harness.home).log_store == ""
    assert registry.load("svc", harness.home).lease_ms == 1000


@pytest.mark.integration
def test_ic_reads_its_registration_from_the_cluster(harness: Harness, cluster: LocalCluster,
                                                    tmp_path: Path) -> None:
    """A replica's machine with no copy of the registry: ``ambrosia ic --registry`` (or
    $AMBROSIA_REGISTRY) takes the registration and the replicas' ports from the cluster."""
    rp, sp, ip, rp1, sp1, ip1 = free_ports(6)
    r = harness.cli("register-instance", "-i", "far", "-rp", str(rp), "-sp", str(sp), "-p",
                    str(ip), "-l", str(harness.logs), "-aa", "--log-store", cluster.address)
    assert r.returncode == 0, r.stderr
    r = harness.cli("add-replica", "-i", "far", "-r", "1", "-rp", str(rp1), "-sp", str(sp1),
                    "-p", str(ip1))
    assert r.returncode == 0, r.stderr
    home = tmp_path / "elsewhere"
    home.mkdir()
    shutil.copyfile(harness.home / "link-secret", home / "link-secret")
    env = dict(os.environ, AMBROSIA_HOME=str(home))
    r = subprocess.run([sys.executable, "-m", "ambrosia_cli", "ic", "-i", "nowhere",
                        "--registry", cluster.address], env=env, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"ambrosia: error: instance 'nowhere' is registered neither in {home} "
                        f"nor in the cluster at {cluster.address.split('?')[0]}\n")
    assert not registry.registration_exists("far", home)
    proc = launch.start_coordinator("far", 1, env=dict(env, AMBROSIA_REGISTRY=cluster.address))
    try:
        here = registry.load("far", harness.home)
        assert registry.load("far", home) == here
        assert registry.replica(registry.load("far", home), 1, home) == registry.replica(
            here, 1, harness.home)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def _cmdlines_naming(d: Path) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        if str(d) in cmd:
            out.append(cmd)
    return out


@pytest.mark.integration
def test_raft_cluster_command(tmp_path: Path) -> None:
    """``ambrosia raft-cluster``: prints an address that answers, stops its peers on
    SIGTERM; without zmq-raft installed, one line saying how to install it."""
    d = tmp_path / "cluster"
    run = [sys.executable, "-m", "ambrosia_cli", "raft-cluster", "--dir", str(d)]
    r = subprocess.run(run, env=dict(os.environ, AMBROSIA_ZMQ_RAFT=str(tmp_path / "none")),
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.startswith(f"ambrosia: error: zmq-raft is not installed at {tmp_path}")
    assert len(r.stderr.splitlines()) == 1
    proc = subprocess.Popen([*run, "--secret", "s"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        assert address.startswith("raft://127.0.0.1:") and address.endswith("?secret=s")
        assert asyncio.run(fetch_registration(address, "nobody")) is None
        assert len(_cmdlines_naming(d)) == 4  # the command and its three peers
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (0, "")
    assert _cmdlines_naming(d) == []
