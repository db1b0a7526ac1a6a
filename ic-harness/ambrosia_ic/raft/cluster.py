"""A local ØMQ RAFT cluster for development and tests: N peers of the npm package
``zmq-raft`` on one host (127.0.0.1 unless told otherwise), each a ``node`` process
with its own data directory.

``make raft-cluster`` installs the package in ``ic-harness/zmq-raft`` (``make test``
does it too); ``AMBROSIA_ZMQ_RAFT`` names another installation (the directory holding
``node_modules``). Run one by hand with::

    python -m ambrosia_ic.raft.cluster --dir /tmp/raft --peers 3 [--secret S] [--host H]

which prints the peers' urls (the ``raft://`` address to register) and runs until
interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.processes import kill_process

from ..registry.hosts import LOOPBACK
from ..registry.ports import free_ports
from .client import RaftClient
from .errors import RaftError

__all__ = ["LocalCluster", "Peer", "zmq_raft_script"]

_HARNESS = Path(__file__).resolve().parents[2]


def zmq_raft_script() -> Path:
    """The peer program of the installed ``zmq-raft`` package.

    Raises:
        RaftError: not installed (one line saying how to install it).
    """
    base = Path(os.environ.get("AMBROSIA_ZMQ_RAFT", _HARNESS / "zmq-raft"))
    script = base / "node_modules" / "zmq-raft" / "bin" / "zmq-raft.js"
    if not script.is_file():
        raise RaftError(f"zmq-raft is not installed at {base} (run `make raft-cluster`, or "
                        "set AMBROSIA_ZMQ_RAFT to the directory holding its node_modules)")
    return script


@attrs.frozen
class Peer:
    id: str
    url: str  # the ROUTER socket clients and peers connect to
    pub: str  # the broadcast state machine's PUB socket


class LocalCluster:
    """Peers ``p1..pN`` of one cluster under ``directory``.

    Args:
        directory: holds the config and each peer's data (kept across restarts).
        peers: how many peers (3 tolerates one down).
        secret: the cluster's secret.
        request_id_ttl: how long (ms) a request id stays fresh (the cluster's minimum
            is 60 s; the default is 8 hours).
        host: the address every peer binds and is reached at (an IP address: ØMQ binds
            no names).
    """

    def __init__(self, directory: Path, peers: int = 3, secret: str = "",
                 request_id_ttl: int | None = None, host: str = LOOPBACK) -> None:
        self.dir = Path(directory)
        self.secret = secret
        self.host = _check_host(host)
        self.script = zmq_raft_script()
        ports = free_ports(2 * peers, self.host)
        self.peers = [Peer(f"p{i + 1}", f"tcp://{Address(host, ports[2 * i])}",
                           f"tcp://{Address(host, ports[2 * i + 1])}") for i in range(peers)]
        self.request_id_ttl = request_id_ttl
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.peers]

    @property
    def address(self) -> str:
        """The ``raft://`` address of this cluster (see ``ambrosia_ic.registry.raft_address``)."""
        hosts = ",".join(u.removeprefix("tcp://") for u in self.urls)
        return f"raft://{hosts}" + (f"?secret={self.secret}" if self.secret else "")

    def peer(self, peer_id: str) -> Peer:
        return next(p for p in self.peers if p.id == peer_id)

    def _write_config(self) -> Path:
        raft: dict[str, object] = {
            "secret": self.secret,
            "peers": [{"id": p.id, "url": p.url, "pub": p.pub} for p in self.peers],
            "data": {"path": str(self.dir / "data"), "appendIdToPath": True},
            "webmonitor": {"enable": False},
        }
        if self.request_id_ttl is not None:
            raft["requestIdTtl"] = self.request_id_ttl
        path = self.dir / "cluster.hjson"
        path.write_text(json.dumps({"raft": raft}, indent=2))  # JSON is valid HJSON
        return path

    def start(self, wait: float = 20.0) -> None:
        """Start every peer and wait for a leader.

        Raises:
            RaftError: a peer exited, or no leader within ``wait`` seconds.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        for p in self.peers:
            self.start_peer(p.id)
        self.wait_for_leader(wait)

    def start_peer(self, peer_id: str) -> None:
        p = self.peer(peer_id)
        log = open(self.dir / f"{p.id}.log", "ab")  # noqa: SIM115 - the child owns it
        try:
            self.procs[p.id] = subprocess.Popen(
                ["node", str(self.script), "-c", str(self.dir / "cluster.hjson"),
                 "-b", p.url, "-p", p.pub, p.id],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.dir, start_new_session=True)
        finally:
            log.close()

    def kill_peer(self, peer_id: str) -> None:
        """``kill -9`` one peer (its data stays for a restart)."""
        proc = self.procs.pop(peer_id, None)
        if proc is not None:
            kill_process(proc)

    def signal_peer(self, peer_id: str, sig: int) -> None:
        self.procs[peer_id].send_signal(sig)

    def leader(self, timeout: float = 10.0) -> str:
        """The current leader's id (waits out an election)."""
        async def ask() -> str:
            client = RaftClient(self.urls, self.secret, timeout=timeout)
            try:
                cfg = await client.request_config()
            finally:
                client.close()
            assert cfg.leader_id is not None
            return cfg.leader_id
        return asyncio.run(ask())

    def wait_for_leader(self, wait: float = 20.0) -> str:
        deadline = time.monotonic() + wait
        for pid, proc in self.procs.items():
            if proc.poll() is not None:
                raise RaftError(f"raft peer {pid} exited with {proc.returncode}; see "
                                f"{self.dir / (pid + '.log')}")
        return self.leader(max(0.5, deadline - time.monotonic()))

    def stop(self) -> None:
        for pid in list(self.procs):
            kill_process(self.procs.pop(pid))  # a stopped (SIGSTOP) peer dies too

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_host(host: str) -> str:
    """Raises RaftError unless ``host`` is an IP address peers can be dialled at."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise RaftError(f"--host {host!r} is not an IP address (the peers bind it)") from None
    if ip.is_unspecified:
        raise RaftError(f"--host {host} is not an address the peers can be reached at: give "
                        "one of this machine's addresses")
    return host


def serve(directory: Path, peers: int = 3, secret: str = "", host: str = LOOPBACK) -> int:
    """Run a local cluster until SIGINT or SIGTERM (0) or a peer exits (1); prints its
    ``raft://`` address on stdout once it has a leader.

    Raises:
        RaftError: it could not start (zmq-raft missing, a peer failed).
    """
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # the peers are stopped on the way out, not orphaned

    signal.signal(signal.SIGTERM, stop)
    cluster = LocalCluster(directory, peers, secret, host=host)
    try:
        cluster.start()
        print(cluster.address, flush=True)
        while all(p.poll() is None for p in cluster.procs.values()):
            time.sleep(0.5)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", required=True, type=Path,
                        help="where the peers' config, logs and data go (created if missing)")
    parser.add_argument("--peers", type=int, default=3, help="how many peers (default 3)")
    parser.add_argument("--secret", default="",
                        help="the cluster's secret (default: none); clients add ?secret=S")
    parser.add_argument("--host", default=LOOPBACK,
                        help="the address the peers bind and are reached at (default "
                             "127.0.0.1)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ambrosia_ic.raft.cluster",
                                     description="run a local ØMQ RAFT cluster")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return serve(args.dir, args.peers, args.secret, args.host)
    except RaftError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
