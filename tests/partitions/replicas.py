"""An active/active instance ``S`` of three replicas and a caller ``C``, each on its own
node of a ``Network`` (``r0``, ``r1``, ``r2``, ``c``), with the log in files (one
directory that every node sees: namespaces share the file system) or in a three-peer ØMQ
RAFT cluster on a node of its own (``raft``), so that a cut can part a replica from the
log. Each coordinator runs as ``ip netns exec NS ambrosia ic``; its binding is the raw
test binding (``CounterApp``) in this process, connected from inside the namespace. C
streams numbered calls (``C:k``) to S; S answers each.

What is checked, from the bindings' own records:

- exactly once and in order: C sent ``C:0..n-1``; S's primary applied exactly those, in
  that order; C holds every answer, in that order;
- a primary cut off stops acknowledging before a new one takes over: every record the
  old primary's binding received came before the new primary's ``BecomingPrimary``, and
  is a prefix of what the new primary applied (nothing only the old one saw);
- after healing, one primary: one live coordinator whose binding is primary, and it is
  the one the newest claim names.

Every process's listen address is set in one place: the registration (``ic_host`` of
each replica and of C: its node's address) and ``raft-cluster --host``; options every
listening process gets are ``LISTEN_OPTIONS`` (``ambrosia ic``) and
``RAFT_LISTEN_OPTIONS`` (``raft-cluster``).

Runs that need no partitions (power cuts: ``tests/power``) put every node on this host's
loopback (``OneHost``), the registry and logs where they choose, on free ports.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from ambrosia_ic import launch, registry
from ambrosia_ic.lease import current_primary

from ambrosia_core.processes import kill_process
from tests.ic.rawbinding import CounterApp, Driver, RawBinding
from tests.launcher import overdue

REPLICAS = ("r0", "r1", "r2")
CALLER = "c"
RAFT = "raft"
SECRET = "partitions"
# Options of every `ambrosia ic` this harness starts, and of its `raft-cluster`. The
# coordinators listen on their namespace's bridge address, beyond loopback, in plain TCP:
# the test network is private, and --insecure says so (the coordinator logs it). The Raft
# peers speak no TLS at all (see the README's "Across hosts: TLS").
LISTEN_OPTIONS: tuple[str, ...] = ("--insecure",)
RAFT_LISTEN_OPTIONS: tuple[str, ...] = ()
# Each replica's receive, send and link ports, then C's: on a network every node has an
# address of its own, so the same ports serve every run.
PORTS: tuple[int, ...] = (41001, 41002, 41003, 41011, 41012, 41013, 41021, 41022, 41023,
                          41101, 41102, 41103)


class Nodes(Protocol):
    """Where the nodes are: a ``Network``, or ``OneHost``."""

    def address(self, node: str) -> str: ...

    def prefix(self, node: str) -> list[str]: ...

    def inside(self, node: str) -> contextlib.AbstractContextManager[None]: ...


N = TypeVar("N", bound=Nodes)


class OneHost:
    """Every node on this host's loopback, in this network namespace: for a replica set
    that is faulted otherwise than by the network (a power cut of the whole host)."""

    def address(self, node: str) -> str:
        return "127.0.0.1"

    def prefix(self, node: str) -> list[str]:
        return []

    @contextlib.contextmanager
    def inside(self, node: str) -> Iterator[None]:
        yield


class PartitionCheckError(AssertionError):
    """A run broke exactly-once, ordering, the primary's hand-over or liveness."""


class TimedDriver(Driver):
    """A Driver that also notes when each control event (BecomingPrimary, ...) came, and
    how many calls its app had applied then."""

    def __init__(self, binding: RawBinding, app: CounterApp) -> None:
        super().__init__(binding, app)
        self.event_times: list[float] = []
        self.event_applied: list[int] = []

    def _handle(self, rec: Any, raw: bytes) -> None:
        before = len(self.events)
        super()._handle(rec, raw)
        if len(self.events) > before:
            self.event_times.append(time.monotonic())
            with self.lock:
                self.event_applied.append(len(self.app.received))

    def _primary_event(self) -> int | None:
        return next((i for i, name in enumerate(self.events)
                     if name in ("becoming-primary", "take-becoming-primary-checkpoint")),
                    None)

    def became_primary_at(self) -> float | None:
        i = self._primary_event()
        return None if i is None or i >= len(self.event_times) else self.event_times[i]

    def applied_when_primary(self) -> list[str] | None:
        """The calls the app had applied when it was made primary (what the replica
        recovered from the log, before any new input)."""
        i = self._primary_event()
        if i is None or i >= len(self.event_applied):
            return None
        return self.snapshot()["received"][:self.event_applied[i]]


def wait_for(cond: Any, what: str, limit: float = 60.0) -> Any:
    start = time.monotonic()
    while True:
        value = cond()
        if value:
            return value
        if overdue(start, limit):
            raise PartitionCheckError(f"gave up waiting for {what} after {limit:g} s")
        time.sleep(0.01)


class ReplicaSet(Generic[N]):
    """S's three replicas and the caller C on ``net`` (nodes r0, r1, r2, c, and raft for
    ``store="raft"``); ``close()`` stops every process.

    Args:
        net: a started Network with those nodes, or ``OneHost()``.
        tmp: where every process's stderr goes (and the Raft cluster's files).
        store: ``"files"`` or ``"raft"``.
        lease_ms: S's lease.
        files: where the registry (``home``) and the logs (``logs``) go (default: tmp).
        ports: twelve ports, laid out as ``PORTS`` (default: those).
    """

    def __init__(self, net: N, tmp: Path, store: str, lease_ms: int = 1000,
                 *, files: Path | None = None, ports: Sequence[int] = PORTS) -> None:
        if store not in ("files", "raft"):
            raise ValueError("store must be 'files' or 'raft'")
        if len(ports) != len(PORTS):
            raise ValueError(f"need {len(PORTS)} ports, laid out as PORTS")
        self.net = net
        self.tmp = tmp
        self.store = store
        self.lease_ms = lease_ms
        self.home = (files or tmp) / "home"
        self.logs = (files or tmp) / "logs"
        self.ports = tuple(ports)
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.drivers: dict[str, TimedDriver] = {}
        self.raft: subprocess.Popen[str] | None = None
        self.raft_address = ""
        self.starts = 0
        self.sent = 0
        self._stop = threading.Event()
        self._pump: threading.Thread | None = None
        self._files: list[Any] = []
        self.stderr_paths: dict[str, list[Path]] = {}

    # ------------------------------------------------------------------ start
    def start(self) -> ReplicaSet[N]:
        if self.store == "raft":
            self._start_raft()
        log_store = self.raft_address if self.store == "raft" else ""
        for n, node in enumerate(REPLICAS):
            rp, sp, ip = self.ports[3 * n:3 * n + 3]
            kw: dict[str, Any] = dict(receive_port=rp, send_port=sp, ic_port=ip,
                                      home=self.home, ic_host=self.net.address(node))
            if n == 0:
                registry.register(instance_name="S", log_dir=self.logs,
                                  active_active=True, log_store=log_store,
                                  lease_ms=self.lease_ms, log_trigger_size_mb=1, **kw)
            else:
                registry.add_replica(instance_name="S", replica=n, **kw)
        rp, sp, ip = self.ports[9:12]
        registry.register(instance_name="C", receive_port=rp, send_port=sp, ic_port=ip,
                          log_dir=self.logs, home=self.home,
                          ic_host=self.net.address(CALLER))
        self.start_replica(0)
        wait_for(self.drivers["r0"].primary.is_set, "S's first start")
        for n in (1, 2):
            self.start_replica(n)
        for node in ("r1", "r2"):
            wait_for(lambda d=self.drivers[node]: "checkpoint-loaded" in d.events,
                     f"{node} following")
        self._start_ic("C", 0, CALLER)
        client = self._drive("C", 0, CALLER, CounterApp("C", "S"))
        wait_for(client.primary.is_set, "C's first start")
        return self

    def _start_raft(self) -> None:
        err = self._stderr("raft")
        self.raft = subprocess.Popen(
            [*self.net.prefix(RAFT), sys.executable, "-m", "ambrosia_cli", "raft-cluster",
             "--dir", str(self.tmp / "raft"), "--host", self.net.address(RAFT),
             "--secret", SECRET, *RAFT_LISTEN_OPTIONS],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.raft.stdout is not None
        line = self.raft.stdout.readline().strip()
        if not line.startswith("raft://"):
            raise PartitionCheckError(f"the Raft cluster did not start: {_tail(err.name)}")
        self.raft_address = line

    def _stderr(self, what: str) -> Any:
        self.starts += 1
        path = self.tmp / f"{what}-{self.starts}.err"
        f = open(path, "w")  # noqa: SIM115 - closed in close()
        self._files.append(f)
        self.stderr_paths.setdefault(what, []).append(path)
        return f

    def _start_ic(self, name: str, replica: int, node: str) -> subprocess.Popen[str]:
        err = self._stderr(node)
        proc = launch.start_coordinator(name, replica, home=self.home, stderr=err,
                                        options=LISTEN_OPTIONS, prefix=self.net.prefix(node))
        self.procs[node] = proc
        return proc

    def _drive(self, name: str, replica: int, node: str, app: CounterApp) -> TimedDriver:
        rep = registry.replica(registry.load(name, self.home), replica, self.home)
        with self.net.inside(node):
            binding = RawBinding(rep.receive_port, rep.send_port)
        d = TimedDriver(binding, app)
        self.drivers[node] = d
        d.start()
        return d

    def start_replica(self, n: int) -> None:
        node = REPLICAS[n]
        self._start_ic("S", n, node)
        self._drive("S", n, node, CounterApp("S"))

    def rebind(self, n: int) -> None:
        """A new binding for replica ``n``, whose coordinator, fenced, rejoined as a
        standby in its process: it serves a binding again on the same ports."""
        node = REPLICAS[n]
        wait_for(lambda: "rejoining as a standby" in self.said(node),
                 f"{node} rejoining as a standby", 60)

        def attached() -> bool:
            try:  # its ports open again once it has started over
                self._drive("S", n, node, CounterApp("S"))
            except ConnectionRefusedError:
                time.sleep(0.05)
                return False
            return True
        wait_for(attached, f"{node} serving a binding again", 60)

    @property
    def client(self) -> TimedDriver:
        return self.drivers[CALLER]

    # ------------------------------------------------------------------ load
    def start_pump(self, pause: float = 0.003) -> None:
        """C streams ``C:sent``, ``C:sent+1``, ... (again after ``stop_pump``)."""
        client = self.client
        self._stop.clear()

        def pump() -> None:
            while not self._stop.is_set():
                client.impulse(self.sent)
                self.sent += 1
                time.sleep(pause)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()

    def stop_pump(self) -> None:
        self._stop.set()
        if self._pump is not None:
            self._pump.join(30)

    # ------------------------------------------------------------------ roles
    def live(self, node: str) -> bool:
        """Its coordinator runs and still serves this test's binding (a fenced primary
        rejoins as a standby in the same process and closes the binding, which does not
        start over here)."""
        return (node in self.procs and self.procs[node].poll() is None
                and node in self.drivers and self.drivers[node].thread.is_alive())

    def said(self, node: str) -> str:
        """What the coordinator on ``node`` logged in its latest start."""
        return self.stderr_paths[node][-1].read_text(errors="replace")

    def primaries(self) -> list[str]:
        """Replicas whose coordinator runs and whose binding was made primary."""
        return [n for n in REPLICAS if self.live(n) and self.drivers[n].primary.is_set()]

    def claimed(self) -> str | None:
        """The replica the newest epoch claim names (the file the primary writes)."""
        info = current_primary(registry.instance_dir(registry.load("S", self.home)))
        n = info.get("replica") if info else None
        return None if n is None else REPLICAS[int(n)]

    def wait_new_primary(self, old: str, limit: float = 60.0) -> str:
        return str(wait_for(lambda: next((n for n in self.primaries() if n != old), None),
                            f"a primary other than {old}", limit))

    def wait_one_primary(self, limit: float = 60.0) -> str:
        """After healing: exactly one primary, the one the newest claim names."""
        def one() -> str | None:
            p = self.primaries()
            return p[0] if len(p) == 1 and self.claimed() == p[0] else None

        try:
            return str(wait_for(one, "exactly one primary", limit))
        except PartitionCheckError:
            raise PartitionCheckError(
                f"primaries {self.primaries()}, newest claim names {self.claimed()}\n"
                f"{self.tails()}") from None

    # ------------------------------------------------------------------ checks
    def check_exactly_once(self, primary: str, limit: float = 120.0) -> int:
        """Every call C sent applied once, in order, by ``primary``; every answer back.
        If the primary moves while the calls settle (a slow link can outlast a lease),
        the check follows it to the one live primary."""
        client = self.client

        def settled() -> bool:
            nonlocal primary
            now = self.primaries()
            if len(now) == 1:
                primary = now[0]
            c = client.snapshot()
            return (len(c["sent"]) == self.sent and c["acked"] == c["sent"]
                    and self.drivers[primary].snapshot()["received"] == c["sent"])

        try:
            wait_for(settled, "every call applied and answered", limit)
        except PartitionCheckError:
            c = client.snapshot()
            got = self.drivers[primary].snapshot()["received"]
            raise PartitionCheckError(
                f"C sent {len(c['sent'])} of {self.sent}, holds {len(c['acked'])} answers; "
                f"{primary} applied {len(got)} ({len(got) - len(set(got))} duplicates)\n"
                f"{self.tails()}") from None
        expected = [f"C:{k}" for k in range(self.sent)]
        c = client.snapshot()
        problems = []
        for what, got in (("C sent", c["sent"]), (f"{primary} applied",
                                                  self.drivers[primary].snapshot()["received"]),
                          ("C holds answers to", c["acked"])):
            if got != expected:
                bad = next((i for i, (x, y) in enumerate(zip(got, expected, strict=False))
                            if x != y), min(len(got), len(expected)))
                problems.append(f"{what} {len(got)} calls ({len(got) - len(set(got))} "
                                f"duplicates), first wrong at {bad}: {got[bad:bad + 3]}")
        errors = [f"{n}: {d.error!r}" for n, d in self.drivers.items() if d.error is not None]
        if problems or errors:
            raise PartitionCheckError("; ".join(problems + errors))
        return len(expected)

    def check_handover(self, old: str, new: str) -> dict[str, float]:
        """The old primary acknowledged nothing after the new one took over, and nothing
        the new one did not apply. Returns the margins (s) for the record."""
        taken = self.drivers[new].became_primary_at()
        if taken is None:
            raise PartitionCheckError(f"{new} never became primary")
        o = self.drivers[old]
        with o.lock:
            times = list(o.times)
            applied = list(o.app.received)
        late = [t - taken for t in times if t >= taken]
        if late:
            raise PartitionCheckError(
                f"{old} delivered {len(late)} record(s) after {new} became primary, the "
                f"first {late[0] * 1000:.1f} ms after")
        theirs = self.drivers[new].snapshot()["received"]
        if applied != theirs[:len(applied)]:
            raise PartitionCheckError(
                f"{old} applied calls {new} does not hold in that order: "
                f"{len(applied)} vs {len(theirs)}")
        return {"last_old_delivery_before_takeover_s": taken - times[-1] if times else 0.0}

    # ------------------------------------------------------------------ end
    def tails(self, lines: int = 8) -> str:
        out = []
        for what, paths in self.stderr_paths.items():
            for p in paths[-1:]:
                out.append(f"--- {what} ({p.name})\n{_tail(str(p), lines)}")
        return "\n".join(out)

    def close(self) -> None:
        self.stop_pump()
        for d in self.drivers.values():
            d.b.close()
        for proc in self.procs.values():
            kill_process(proc, group=False)
        if self.raft is not None:
            self.raft.terminate()
            try:
                self.raft.wait(20)
            except subprocess.TimeoutExpired:
                kill_process(self.raft, group=False)
            if self.raft.stdout is not None:
                self.raft.stdout.close()
        for f in self._files:
            f.close()


def _tail(path: str, lines: int = 8) -> str:
    try:
        return "\n".join(Path(path).read_text().splitlines()[-lines:])
    except OSError:
        return "(no output)"
