"""Senders a callee does not know: ``--publish`` puts an instance whose log stays in files
into the cluster; the callee's ``KnownSenders`` takes it from there, remembers a "not
there" for a while, and answers a handshake before a silent cluster does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic import registry
from ambrosia_ic.coordinator.senders import KnownSenders
from ambrosia_ic.logstore.registrations import fetch_registration, publish_registration
from ambrosia_ic.raft.cluster import LocalCluster

from ambrosia_core.ports import free_ports
from tests.ic.conftest import Harness

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def unique(prefix: str) -> str:
    """The cluster is shared by a worker's tests: each instance name is new to it."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_publish_an_instance_with_its_log_in_files(harness: Harness,
                                                   cluster: LocalCluster) -> None:
    name = unique("pub")
    rp, sp, ip = free_ports(3)
    base = ["register-instance", "-i", name, "-rp", str(rp), "-sp", str(sp), "-p", str(ip),
            "-l", str(harness.logs)]
    r = harness.cli(*base, "--publish", "raft://127.0.0.1")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines()[-1] == ("ambrosia register-instance: error: argument "
                                         "--publish: cluster 'raft://127.0.0.1': '127.0.0.1' "
                                         "is not HOST:PORT")
    assert not registry.registration_exists(name, harness.home)
    r = harness.cli(*base, "--publish", cluster.address)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(f", published in {cluster.address.split('?')[0]}")
    reg = registry.load(name, harness.home)
    assert reg.log_store == ""  # published, not moved: the log stays in files
    assert reg.publish == cluster.address  # and kept
    doc = asyncio.run(fetch_registration(cluster.address, name))
    assert doc == {**reg.to_json(), "replicas": {}}
    # A later change is published again without being told.
    (ip2,) = free_ports(1)
    r = harness.cli("register-instance", "-i", name, "-p", str(ip2))
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(f", published in {cluster.address.split('?')[0]}")
    reg = registry.load(name, harness.home)
    assert reg.ic_port == ip2
    assert asyncio.run(fetch_registration(cluster.address, name)) == {**reg.to_json(),
                                                                      "replicas": {}}
    # --publish '' stops it: the next change stays here.
    r = harness.cli("register-instance", "-i", name, "--publish", "")
    assert r.returncode == 0 and "published" not in r.stdout, r.stdout + r.stderr
    r = harness.cli("register-instance", "-i", name, "-cv", "3")
    assert r.returncode == 0 and "published" not in r.stdout, r.stdout + r.stderr
    doc = asyncio.run(fetch_registration(cluster.address, name))
    assert (doc["current_version"], doc["ic_port"]) == (0, ip2)  # as last published


class Lookups:
    """A ``KnownSenders`` on ``home`` and the tasks and lines it made."""

    def __init__(self, home: Path, cluster: str, **kw: float) -> None:
        self.lines: list[str] = []
        self.tasks: list[asyncio.Task[bool]] = []
        self.senders = KnownSenders(home, lambda: cluster, self.lines.append, self.spawn, **kw)

    def spawn(self, coro: Coroutine[Any, Any, bool]) -> asyncio.Task[bool]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.append(task)
        return task

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def test_a_stranger_is_remembered_then_adopted_once_published(
        tmp_path: Path, cluster: LocalCluster) -> None:
    name = unique("late")
    there = Harness(tmp_path / "there")
    try:
        reg = there.register(name)
    finally:
        there.close()
    home = tmp_path / "here"

    async def run() -> None:
        # The "not there" stands long enough for a busy cluster to take the publication
        # before it is asked again; a lookup may take as long as a busy cluster needs.
        forget = 3.0
        look = Lookups(home, cluster.address, forget=forget, wait=30.0)
        try:
            assert not await look.senders.known_sender(name)
            await publish_registration(cluster.address, registry.published(reg, there.home))
            # Refused unasked while the cluster's "not there" stands...
            assert not await look.senders.known_sender(name)
            assert not registry.registration_exists(name, home)
            await asyncio.sleep(forget + 0.1)
            # ...then asked again, and taken.
            assert await look.senders.known_sender(name)
        finally:
            await look.close()
        assert look.lines == [f"took the registration of {name!r} from "
                              f"{cluster.address.split('?')[0]}"]

    asyncio.run(run())
    assert registry.load(name, home) == reg


def test_a_silent_cluster_is_not_waited_for(tmp_path: Path) -> None:
    (silent,) = free_ports(1)  # nothing answers there
    here = Harness(tmp_path / "here")
    try:
        known = here.register("K")
    finally:
        here.close()

    async def run() -> None:
        look = Lookups(here.home, f"raft://127.0.0.1:{silent}", wait=0.2)
        try:
            # The handshake is answered before the lookup gives up (its line comes later).
            assert not await look.senders.known_sender("Q")
            assert look.lines == []
            assert not look.tasks[0].done()
            # Meanwhile, registered senders are answered at once.
            assert await look.senders.known_sender(known.instance_name)
        finally:
            await look.close()

    asyncio.run(run())


def test_a_caller_registered_again_elsewhere_is_taken_again_when_unreachable(
        tmp_path: Path, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The callee took the caller's registration from the cluster at its first link. The
    caller moves to a new link port (registered again, published again on its own): the
    callee's replies cannot connect to the old port, so it looks in the cluster, takes
    the newer registration, and the replies arrive."""
    import shutil

    from tests.launcher import wait_until

    callee, caller = Harness(tmp_path / "callee"), Harness(tmp_path / "caller")
    s, c = unique("S"), unique("C")
    try:
        for h, name in ((callee, s), (caller, c)):
            # Both "machines" are this one: no port of one registry may be the other's.
            rp, sp, ip = registry.unregistered_free_ports(3, callee.home)
            r = h.cli("register-instance", "-i", name, "-rp", str(rp), "-sp", str(sp),
                      "-p", str(ip), "-l", str(h.logs), "--publish", cluster.address)
            assert r.returncode == 0, r.stderr
        shutil.copyfile(callee.home / "link-secret", caller.home / "link-secret")
        monkeypatch.setenv("AMBROSIA_REGISTRY", cluster.address)
        ps = callee.start(s)
        ds = callee.drive(s)
        pc = caller.start(c)
        dc = caller.drive(c, peer=s)
        wait_until(lambda: ds.primary.is_set() and dc.primary.is_set(), "both primary")
        dc.impulse(1)
        wait_until(lambda: dc.snapshot()["acked"] == [f"{c}:1"], "the first reply")
        assert registry.adopted(c, callee.home)  # taken at C's first link

        caller.kill9(pc)
        (new_port,) = registry.unregistered_free_ports(1, callee.home)
        r = caller.cli("register-instance", "-i", c, "-p", str(new_port))
        assert r.returncode == 0 and "published in" in r.stdout, r.stdout + r.stderr
        pc = caller.start(c)
        dc = caller.drive(c, peer=s)
        wait_until(dc.primary.is_set, "the caller back")
        dc.impulse(2)
        wait_until(lambda: f"{c}:2" in ds.snapshot()["received"], "the call after the move")
        wait_until(lambda: dc.snapshot()["acked"] == [f"{c}:1", f"{c}:2"],
                   "the reply after the move")
        assert callee.reg(c).ic_port == new_port
        assert f"took a newer registration of {c!r} from" in callee.stderr_of(ps)
        assert ps.poll() is None
    finally:
        caller.close()
        callee.close()


def test_a_registration_made_here_is_never_taken_from_the_cluster_again(
        tmp_path: Path) -> None:
    there, here = Harness(tmp_path / "there"), tmp_path / "here"
    try:
        reg = there.register("X")
    finally:
        there.close()
    registry.adopt(registry.published(reg, there.home), here)
    assert registry.adopted("X", here) and registry.load("X", here) == reg
    rp, sp, ip = registry.unregistered_free_ports(3, here)
    registry.register(instance_name="X", receive_port=rp, send_port=sp, ic_port=ip,
                      log_dir=tmp_path / "logs", home=here)
    assert not registry.adopted("X", here)
    assert registry.adopted("X", there.home) is False
