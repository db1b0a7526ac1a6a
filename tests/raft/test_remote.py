"""A caller on another machine: its registry shares no directory with the callee's. It
takes the callee's registration from the Raft cluster, its link finds the callee's primary
through the epoch claims there, and follows a new claim after the primary is killed with
``kill -9``: every call applied exactly once, in order."""

from __future__ import annotations

import asyncio
import functools
import json
import operator
import shutil
from pathlib import Path

import pytest
from ambrosia_ic import registry
from ambrosia_ic.logstore.registrations import publish_registration
from ambrosia_ic.raft.cluster import LocalCluster

from tests.activeactive.cluster import Cluster
from tests.ic.conftest import Harness
from tests.launcher import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def copy_registration(src: Harness, dst: Harness, name: str) -> None:
    """What an operator copies to the other machine: a registration, with a log
    directory that machine cannot see."""
    data = json.loads((src.home / "instances" / f"{name}.json").read_text())
    data["log_dir"] = "/nonexistent/the-other-machine"
    del data["check"]  # edited: its check bytes go (a file without them is read as it is)
    (dst.home / "instances" / f"{name}.json").write_text(json.dumps(data))


# `make chaos`: test_hosts's caller, on a machine of its own, takes S's registration from the
# cluster and follows the claim through kill -9 of S's primary, in make test.
@pytest.mark.chaos
def test_caller_elsewhere_follows_the_claim(tmp_path: Path, cluster: LocalCluster,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    server, caller = Harness(tmp_path / "server"), Harness(tmp_path / "caller")
    try:
        cl = Cluster(server, replicas=2, log_store=cluster.address)
        # Both "machines" are this one: C's ports must not be S's registered ones either.
        rp, sp, ip = registry.unregistered_free_ports(3, server.home)
        registry.register(instance_name="C", receive_port=rp, send_port=sp, ic_port=ip,
                          log_dir=caller.logs, home=caller.home)
        # What `register-instance --log-store` does on the server's machine.
        asyncio.run(publish_registration(cluster.address,
                                         registry.published(server.reg("S"), server.home)))
        copy_registration(caller, server, "C")  # where S's replies go
        shutil.copyfile(server.home / "link-secret", caller.home / "link-secret")
        cl.start_replica(0)
        wait_until(cl.drivers[0].primary.is_set, "first start")
        cl.start_replica(1)
        wait_until(functools.partial(operator.contains, cl.drivers[1].events,
                                     "checkpoint-loaded"), "following")
        # The client runs from the caller's registry, which takes S's registration from
        # the cluster; links to S never read S's directory (the claims say where it is).
        monkeypatch.setenv("AMBROSIA_REGISTRY", cluster.address)
        cl.client_proc = caller.start("C")
        monkeypatch.delenv("AMBROSIA_REGISTRY")
        cl.client = caller.drive("C", peer="S")
        wait_until(cl.client.primary.is_set, "client primary")
        cl.start_pump()
        wait_until(lambda: len(cl.received_by(0)) > 20, "calls reaching the first primary")
        cl.kill9(0)
        new = cl.wait_primary(not_=0)
        sent = cl.sent
        wait_until(lambda: len(cl.received_by(new)) > sent, "calls reaching the new primary")
        cl.stop_pump()
        assert len(cl.check_exactly_once(new)) > sent
        assert "took the registration of 'S' from raft://" in caller.stderr_of(cl.client_proc)
        assert caller.reg("S") == server.reg("S")
    finally:
        caller.close()
        server.close()
