"""Replicas and a caller on four "machines": each its own $AMBROSIA_HOME and its own
address (Linux routes all of 127/8 to this host, so 127.0.0.2..5 stand for four hosts),
and a Raft cluster on a fifth. Only replica 0's machine registers S; the others get the
registration from the cluster and the link secret as a file. The caller, whose log stays
in files, publishes its registration in the cluster (``--publish``): no machine of S has
a copy until S's primary takes it from there at the caller's first link. No link server
listens on 127.0.0.1. The primary is killed with ``kill -9`` while the caller streams
calls: every call applied exactly once, in order, and every reply back at the caller. A
caller with the wrong secret, and one with the right secret that is registered nowhere S
looks, are refused, in one line on each side."""

from __future__ import annotations

import functools
import operator
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ambrosia_ic import launch, registry

from tests.ic.conftest import Harness
from tests.ic.rawbinding import CounterApp, Driver
from tests.launcher import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]  # replicas 0, 1, 2 of S
CALLER = "127.0.0.5"
RAFT = "127.0.0.6"


def listeners(ports: set[int]) -> dict[int, set[str]]:
    """Which addresses listen on each of ``ports`` (from /proc/net/tcp and tcp6)."""
    found: dict[int, set[str]] = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, state = fields[1], fields[3]
            hex_ip, hex_port = address.split(":")
            if state != "0A" or int(hex_port, 16) not in ports:  # 0A: LISTEN
                continue
            ip = (socket.inet_ntoa(struct.pack("<I", int(hex_ip, 16))) if table == "tcp"
                  else f"ipv6:{hex_ip}")
            found.setdefault(int(hex_port, 16), set()).add(ip)
    return found


def start_ic(h: Harness, name: str, replica: int = 0, *extra: str,
             cluster: str = "") -> subprocess.Popen[str]:
    """``ambrosia ic`` on machine ``h``; ``cluster`` is where registrations it lacks come
    from."""
    h.starts += 1
    err = open(h.tmp / f"{name}-{h.starts}.err", "w")  # noqa: SIM115 - closed by the harness
    h.files.append(err)
    env = dict(os.environ, AMBROSIA_REGISTRY=cluster) if cluster else None
    proc = launch.start_process(["ic", "-i", name, "--replica", str(replica), *extra],
                                env=env, home=h.home, stderr=err)
    h.procs.append(proc)
    h.stderr_paths[proc.pid] = Path(err.name)
    return proc


def test_replicas_and_a_caller_on_four_hosts(tmp_path: Path) -> None:
    m = [Harness(tmp_path / f"machine{i}") for i in range(5)]
    raft = m[0].popen("raft-cluster", "--dir", str(tmp_path / "raft"), "--host", RAFT,
                      "--secret", "s3")
    try:
        _run(m, raft)
    finally:
        raft.send_signal(signal.SIGTERM)
        raft.wait(30)
        for h in m:
            h.close()


def _run(m: list[Harness], raft: subprocess.Popen[str]) -> None:
    assert raft.stdout is not None
    address = raft.stdout.readline().strip()
    if not address.startswith(f"raft://{RAFT}:"):
        raft.kill()
        assert raft.stderr is not None
        raise AssertionError(f"the cluster did not start: {raft.stderr.read()}")
    ports = registry.unregistered_free_ports(18, m[0].home)
    home0 = m[0]
    # Under load a new primary's first heartbeats can come later than 1 s and a standby
    # rightly takes over again; this test names the primary, so its lease is longer (no
    # option: a registration field, which the command below keeps and publishes).
    registry.register(instance_name="S", receive_port=ports[0], send_port=ports[1],
                      ic_port=ports[2], log_dir=home0.logs, active_active=True,
                      log_store=address, ic_host=HOSTS[0], lease_ms=4000, home=home0.home)
    r = home0.cli("register-instance", "-i", "S", "-rp", str(ports[0]), "-sp", str(ports[1]),
                  "-p", str(ports[2]), "-l", str(home0.logs), "-aa", "--log-store", address,
                  "--ic-host", HOSTS[0])
    assert r.returncode == 0, r.stderr
    for n in (1, 2):
        r = home0.cli("add-replica", "-i", "S", "-r", str(n), "-rp", str(ports[3 * n]),
                      "-sp", str(ports[3 * n + 1]), "-p", str(ports[3 * n + 2]),
                      "--ic-host", HOSTS[n])
        assert r.returncode == 0, r.stderr
    secret = home0.tmp / "link-secret.export"
    assert home0.cli("link-secret", "export", str(secret)).returncode == 0
    for h in m[1:4]:
        r = h.cli("link-secret", "import", str(secret))
        assert r.returncode == 0, r.stderr
    caller = m[3]
    r = caller.cli("register-instance", "-i", "C", "-rp", str(ports[9]), "-sp", str(ports[10]),
                   "-p", str(ports[11]), "-l", str(caller.logs), "--ic-host", CALLER,
                   "--publish", address)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(f", published in {address.split('?')[0]}"), r.stdout
    # S's machines have no copy of C's registration: S takes it at C's first link.
    assert not any(registry.registration_exists("C", h.home) for h in m[:3])

    procs: dict[int, subprocess.Popen[str]] = {}
    drivers: dict[int, Driver] = {}

    def start_replica(n: int) -> None:
        procs[n] = start_ic(m[n], "S", n, cluster=address)
        drivers[n] = Driver(m[n].connect("S", n), CounterApp("S")).start()

    start_replica(0)
    wait_until(drivers[0].primary.is_set, "the first start")
    start_replica(1)
    start_replica(2)
    for n in (1, 2):
        wait_until(functools.partial(operator.contains, drivers[n].events, "checkpoint-loaded"),
                   f"replica {n} following")
        assert m[n].reg("S") == home0.reg("S")  # taken from the cluster
    c_proc = start_ic(caller, "C", cluster=address)
    client = Driver(caller.connect("C"), CounterApp("C", "S")).start()
    wait_until(client.primary.is_set, "the caller's first start")

    link_ports = {ports[2]: HOSTS[0], ports[5]: HOSTS[1], ports[8]: HOSTS[2],
                  ports[11]: CALLER}
    assert listeners(set(link_ports)) == {p: {h} for p, h in link_ports.items()}

    sent = [0]
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            client.impulse(sent[0])
            sent[0] += 1
            time.sleep(0.002)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    try:
        wait_until(lambda: len(drivers[0].snapshot()["received"]) > 20, "calls reaching S")
        m[0].kill9(procs[0])
        drivers[0].thread.join(30)
        new = wait_until(lambda: next((n for n in (1, 2) if drivers[n].primary.is_set()), None),
                         "a new primary")
        before = sent[0]
        wait_until(lambda: len(drivers[new].snapshot()["received"]) > before,
                   "calls reaching the new primary")
    finally:
        stop.set()
        pumping.join(30)
    expected = [f"C:{k}" for k in range(sent[0])]
    wait_until(lambda: client.snapshot()["acked"] == expected, "every call acknowledged", 120)
    assert client.snapshot()["sent"] == expected
    assert drivers[new].snapshot()["received"] == expected
    assert client.error is None and all(d.error is None for d in drivers.values())
    assert "took the registration of 'S' from raft://" in caller.stderr_of(c_proc)
    # The first primary took C's from the cluster at C's first link (not later, for its
    # first reply), and kept it.
    first = m[0].stderr_of(procs[0])
    assert "took the registration of 'C' from raft://" in first
    assert "calls to 'C' wait" not in first
    assert m[0].reg("C") == caller.reg("C")

    # Two strangers on a fifth machine: W has the wrong secret; U has the right one
    # but is registered nowhere S looks. Each is refused, in one line on each side.
    stranger = m[4]
    strangers: dict[str, tuple[subprocess.Popen[str], Driver]] = {}
    for k, name in enumerate(("W", "U")):
        r = stranger.cli("register-instance", "-i", name, "-rp", str(ports[12 + 3 * k]),
                         "-sp", str(ports[13 + 3 * k]), "-p", str(ports[14 + 3 * k]),
                         "-l", str(stranger.logs))
        assert r.returncode == 0, r.stderr
        secret_file = _wrong_secret(stranger) if name == "W" else str(secret)
        proc = start_ic(stranger, name, 0, "--link-secret-file", secret_file, cluster=address)
        strangers[name] = (proc, Driver(stranger.connect(name), CounterApp(name, "S")).start())
    for name, (proc, drv) in strangers.items():
        wait_until(drv.primary.is_set, f"{name}'s first start")
        drv.impulse(0)
        wait_until(functools.partial(_logged, stranger, proc, "link to S: 'S' refused the link"),
                   f"{name}'s refusal")
    refused = {"W": "peer claiming to be 'W' failed the link authentication",
               "U": "peer 'U' is not a registered instance"}
    for name, why in refused.items():
        wait_until(functools.partial(_logged, m[new], procs[new], why),
                   f"the primary's refusal of {name}")
    for name, (_, drv) in strangers.items():
        assert drv.snapshot()["acked"] == []
        lines = [line for line in m[new].stderr_of(procs[new]).splitlines()
                 if f"'{name}'" in line]
        assert lines and all(line.startswith("ambrosia-ic: S: replica ")
                             and "refused a link from " in line and line.endswith(refused[name])
                             for line in lines), lines
    assert not registry.registration_exists("U", m[new].home)


def _logged(h: Harness, proc: subprocess.Popen[str], text: str) -> bool:
    return text in h.stderr_of(proc)


def _wrong_secret(h: Harness) -> str:
    path = h.tmp / "wrong-secret"
    path.write_text("cd" * 32)
    return str(path)
