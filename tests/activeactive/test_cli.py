"""add-replica on the command line: registered, or refused in one line."""

from __future__ import annotations

from ambrosia_ic import registry

from ambrosia_core.ports import free_ports
from tests.ic.conftest import Harness


def test_add_replica_and_its_refusals(harness: Harness) -> None:
    harness.register("solo")
    rp, sp, ip = (str(p) for p in free_ports(3))
    r = harness.cli("add-replica", "-i", "solo", "-r", "1", "-rp", rp, "-sp", sp, "-p", ip)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "ambrosia: error: instance 'solo' is not active/active: register it with "
        "--active-active before adding replicas"]
    harness.register("S", active_active=True)
    r = harness.cli("AddReplica", "-i", "S", "-r", "2", "-rp", rp, "-sp", sp, "-p", ip)
    assert r.returncode == 0, r.stderr
    rep = registry.replica(harness.reg("S"), 2, harness.home)
    assert (rep.receive_port, rep.send_port, rep.ic_port) == (int(rp), int(sp), int(ip))
    r = harness.cli("ic", "-i", "S", "--replica", "5")
    assert r.returncode == 1 and "replica 5 of 'S' is not registered" in r.stderr
    assert "Traceback" not in r.stderr
    r = harness.cli("add-replica", "-i", "S", "-r", "3", "-rp", rp, "-sp", rp, "-p", ip)
    assert r.returncode == 1 and "three different ports" in r.stderr
