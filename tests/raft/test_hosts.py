"""Replicas and a caller on four "machines": each its own $AMBROSIA_HOME and its own
address (Linux routes all of 127/8 to this host, so 127.0.0.2..5 stand for four hosts),
and a Raft cluster on a fifth. Only replica 0's machine registers anything; the others
get the registration from the cluster and the link secret as a file. No link server
listens on 127.0.0.1. The primary is killed with ``kill -9`` while the caller streams
calls: every call applied exactly once, in order. A caller with the wrong secret is
refused, in one line on each side."""

from __future__ import annotations

import functools
import json
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

from tests.ic.conftest import Harness, wait_until
from tests.ic.rawbinding import CounterApp, Driver

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
    ports = registry.unregistered_free_ports(15, m[0].home)
    home0 = m[0]
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
                   "-p", str(ports[11]), "-l", str(caller.logs), "--ic-host", CALLER)
    assert r.returncode == 0, r.stderr
    # S's replicas must know C to take its calls: the operator copies its registration.
    c_doc = json.loads((caller.home / "instances" / "C.json").read_text())
    for h in m[:3]:
        (h.home / "instances").mkdir(parents=True, exist_ok=True)
        (h.home / "instances" / "C.json").write_text(json.dumps(c_doc))

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

    # A caller whose secret is not the instance's: refused, one line on each side.
    stranger = m[4]
    r = stranger.cli("register-instance", "-i", "W", "-rp", str(ports[12]), "-sp",
                     str(ports[13]), "-p", str(ports[14]), "-l", str(stranger.logs))
    assert r.returncode == 0, r.stderr
    w_proc = start_ic(stranger, "W", 0, "--link-secret-file", _wrong_secret(stranger),
                      cluster=address)
    w = Driver(stranger.connect("W"), CounterApp("W", "S")).start()
    wait_until(w.primary.is_set, "the stranger's first start")
    w.impulse(0)
    wait_until(lambda: "link to S: 'S' refused the link" in stranger.stderr_of(w_proc),
               "the stranger's refusal")
    wait_until(lambda: "peer claiming to be 'W' failed the link authentication"
               in m[new].stderr_of(procs[new]), "the primary's refusal")
    assert w.snapshot()["acked"] == []
    refusals = [line for line in m[new].stderr_of(procs[new]).splitlines() if "'W'" in line]
    assert all(line.startswith("ambrosia-ic: S: replica ") and "refused a link from " in line
               for line in refusals), refusals


def _wrong_secret(h: Harness) -> str:
    path = h.tmp / "wrong-secret"
    path.write_text("cd" * 32)
    return str(path)
