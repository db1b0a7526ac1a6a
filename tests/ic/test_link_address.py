"""Link addresses in the registry and on the command line (the bind host, the advertised
host), and the link secret moved between registries with ``link-secret export/import``."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess

import pytest
from ambrosia_ic import registry
from ambrosia_ic.errors import RegistryError
from ambrosia_ic.lease import current_primary

from tests.launcher import wait_until

from .conftest import Harness
from .rawbinding import CounterApp, Driver


def _one_line(r: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert r.returncode == code, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def _register(h: Harness, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    rp, sp, ip = registry.unregistered_free_ports(3, h.home)
    return h.cli("register-instance", "-i", name, "-rp", str(rp), "-sp", str(sp), "-p", str(ip),
                 "-l", str(h.logs), *extra)


def test_files_written_before_link_hosts_load_as_loopback(harness: Harness) -> None:
    reg = harness.register("S", active_active=True)
    rep = harness.add_replica("S", 1)
    for path in (harness.home / "instances" / "S.json",
                 harness.home / "replicas" / "S" / "1.json"):
        data = json.loads(path.read_text())
        assert data.pop("ic_host") == data.pop("advertise_host") == "127.0.0.1"
        data.pop("check", None)  # nor check bytes (a replica's file has none)
        path.write_text(json.dumps(data))
    old = harness.reg("S")
    assert (old.ic_host, old.advertise_host) == ("127.0.0.1", "127.0.0.1")
    assert old == reg
    assert registry.replica(old, 1, harness.home) == rep
    # A registration published by an older version, taken from a cluster, too.
    doc = registry.published(old, harness.home)
    other = harness.tmp / "other"
    assert registry.adopt(doc, other) == old
    assert registry.replica(old, 1, other).advertise_host == "127.0.0.1"


def test_hosts_on_the_command_line(harness: Harness) -> None:
    r = _register(harness, "S", "-aa", "--ic-host", "0.0.0.0")
    assert _one_line(r) == ("ambrosia: error: ic host 0.0.0.0 listens on every address, so "
                            "others need to be told which one to dial: give --advertise HOST "
                            "too")
    assert not registry.registration_exists("S", harness.home)
    r = _register(harness, "S", "-aa", "--ic-host", "0.0.0.0", "--advertise", "::")
    assert "advertised host :: is not an address anyone can dial" in _one_line(r)
    r = _register(harness, "S", "-aa", "--ic-host", "not a host")
    assert _one_line(r) == ("ambrosia: error: ic host 'not a host' is not an IP address or a "
                            "host name")

    r = _register(harness, "S", "-aa", "--ic-host", "0.0.0.0", "--advertise", "node-a.example")
    assert r.returncode == 0, r.stderr
    reg = harness.reg("S")
    assert (reg.ic_host, reg.advertise_host) == ("0.0.0.0", "node-a.example")
    assert f"ic {reg.ic_port} (links at node-a.example:{reg.ic_port}, listening on 0.0.0.0)" \
        in r.stdout
    # Changing another option keeps the hosts; a new bind host alone keeps a name that
    # was advertised on purpose.
    assert harness.cli("register-instance", "-i", "S", "-lts", "7").returncode == 0
    assert harness.cli("register-instance", "-i", "S", "--ic-host", "::").returncode == 0
    assert (harness.reg("S").ic_host, harness.reg("S").advertise_host) == ("::", "node-a.example")

    rp, sp, ip = registry.unregistered_free_ports(3, harness.home)
    r = harness.cli("add-replica", "-i", "S", "-r", "1", "-rp", str(rp), "-sp", str(sp),
                    "-p", str(ip), "--ic-host", "127.0.0.3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"ic {ip} (links at 127.0.0.3:{ip})")
    rep = registry.replica(harness.reg("S"), 1, harness.home)
    assert (rep.ic_host, rep.advertise_host) == ("127.0.0.3", "127.0.0.3")
    r = harness.cli("log", "dump", "-i", "S")
    assert r.stdout.splitlines()[1:3] == [
        f"replica 0: links at node-a.example:{reg.ic_port} (listening on ::)",
        f"replica 1: links at 127.0.0.3:{ip}"]


def test_ports_are_checked_per_machine(harness: Harness) -> None:
    """Replicas advertising different hosts run on different machines: the same ports
    there do not collide; on one machine they do."""
    reg = harness.register("S", active_active=True, ic_host="127.0.0.2")
    for n in (1, 2):
        try:
            registry.add_replica(instance_name="S", replica=n, receive_port=reg.receive_port,
                                 send_port=reg.send_port, ic_port=reg.ic_port,
                                 ic_host="127.0.0.3", home=harness.home)
        except RegistryError as err:
            assert n == 2
            refused = str(err)
    assert registry.replica(harness.reg("S"), 1, harness.home).ic_port == reg.ic_port
    assert not (harness.home / "replicas" / "S" / "2.json").exists()
    assert refused == (f"receive port {reg.receive_port} is already registered to "
                       "replica 1 of 'S' (its receive port) on 127.0.0.3; every "
                       "instance and replica needs ports of its own")


def test_link_secret_export_and_import(harness: Harness) -> None:
    harness.register("A")
    secret = registry.link_secret(harness.home)
    file = harness.tmp / "secret"
    r = harness.cli("link-secret", "export", str(file))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert registry.read_secret_file(file) == secret
    assert f"fingerprint {registry.fingerprint(secret)}" in r.stdout
    assert harness.cli("link-secret", "export", str(file)).returncode == 0  # the same: fine

    other = Harness(harness.tmp / "m2")
    r = other.cli("link-secret", "import", str(file))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("took the link secret into the registry at ")
    assert registry.link_secret(other.home) == secret
    assert stat.S_IMODE((other.home / "link-secret").stat().st_mode) == 0o600
    assert other.cli("link-secret", "import", str(file)).stdout.startswith(
        "the link secret was already in")
    assert other.cli("link-secret", "fingerprint").stdout == (
        f"fingerprint {registry.fingerprint(secret)}\n")

    # A different secret is refused both ways unless forced.
    third = Harness(harness.tmp / "m3")
    third.register("B")
    line = _one_line(third.cli("link-secret", "import", str(file)))
    assert line.startswith(f"ambrosia: error: the registry at {third.home} has a different link "
                           "secret (fingerprint ")
    assert line.endswith("coordinators that keep the old one would be refused; --force "
                         "replaces it")
    line = _one_line(third.cli("link-secret", "export", str(file)))
    assert line == (f"ambrosia: error: {file} already exists and does not hold this registry's "
                    "link secret; --force replaces it")
    assert registry.read_secret_file(file) == secret
    assert third.cli("link-secret", "import", "--force", str(file)).returncode == 0
    assert registry.link_secret(third.home) == secret

    bad = harness.tmp / "bad"
    bad.write_text("zz")
    assert _one_line(third.cli("link-secret", "import", str(bad))) == (
        f"ambrosia: error: the link secret {bad} is not hex")
    empty = Harness(harness.tmp / "m4")
    assert _one_line(empty.cli("link-secret", "export", str(harness.tmp / "x"))) == (
        f"ambrosia: error: no link secret in the registry at {empty.home} (`ambrosia "
        "link-secret import FILE` takes one from another machine)")


def test_a_replica_binding_every_address_claims_its_advertised_one(harness: Harness) -> None:
    """The epoch file names the advertised host, not the wildcard the link server binds,
    and a caller dials it."""
    harness.register("S", active_active=True, ic_host="0.0.0.0", advertise_host="127.0.0.7")
    harness.register("C")
    s = harness.start("S", options=["--insecure"])  # every address, so beyond loopback
    assert s.stdout is not None
    server = harness.drive("S")
    wait_until(server.primary.is_set, "S primary")
    info = wait_until(lambda: current_primary(harness.instance_dir("S")), "an epoch file")
    assert (info["ic_host"], info["ic_port"]) == ("127.0.0.7", harness.reg("S").ic_port)
    harness.start("C")
    client = Driver(harness.connect("C"), CounterApp("C", "S")).start()
    wait_until(client.primary.is_set, "C primary")
    for k in range(5):
        client.impulse(k)
    wait_until(lambda: client.snapshot()["acked"] == [f"C:{k}" for k in range(5)], "acks")
    assert server.snapshot()["received"] == [f"C:{k}" for k in range(5)]


def test_ic_overrides_and_a_secret_file(harness: Harness) -> None:
    reg = harness.register("A")
    r = harness.cli("ic", "-i", "A", "--ic-host", "::")
    assert _one_line(r) == ("ambrosia: error: ic host :: listens on every address, so others "
                            "need to be told which one to dial: give --advertise HOST too")
    r = harness.cli("ic", "-i", "A", "--link-secret-file", str(harness.tmp / "nope"))
    assert _one_line(r) == f"ambrosia: error: no link secret file {harness.tmp / 'nope'}"
    os.remove(harness.home / "link-secret")
    file = harness.tmp / "secret"
    file.write_text("ab" * 32)
    proc = harness.popen("ic", "-i", "A", "--ic-host", "127.0.0.8", "--link-secret-file",
                         str(file))
    assert proc.stdout is not None
    ready = proc.stdout.readline().strip()
    assert ready == (f"ambrosia-ic ready: instance=A receive={reg.receive_port} "
                     f"send={reg.send_port} ic={reg.ic_port} link=127.0.0.8:{reg.ic_port}")
    # It listens there and nowhere else: 127.0.0.1 refuses.
    with socket.create_connection(("127.0.0.8", reg.ic_port), timeout=5):
        pass
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", reg.ic_port), timeout=5)
