"""Failover through full coordinators, for ``bench_raft``: an active/active ``Counter``
(``failover_apps``) with REPLICAS replicas, each an ``ambrosia ic --replica N`` and an
``ambrosia run`` connected to it, and a ``Caller`` immortal (``ambrosia run`` with its own
coordinator) awaiting ``add(i)`` in a loop.

Each kill: wait for fresh replies, ``kill -9`` the primary's coordinator (or its binding,
after which the coordinator exits), and time from the kill to the first reply the caller
gets after the new primary's binding said "became primary" (a reply can only come from
the new primary then; the line is stamped when this process reads it, a millisecond or
so late, so a figure may include one extra round trip). The killed replica comes back as
a standby before the next kill. At the end the caller stops and every reply must say its
request was applied exactly once, in order (``failover_apps``).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (ROOT, ROOT / "ic-harness"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from ambrosia_ic import launch, registry  # noqa: E402
from ambrosia_ic.lease import current_primary  # noqa: E402

from ambrosia_core.ports import free_ports  # noqa: E402
from ambrosia_core.processes import kill_process  # noqa: E402

SERVER = "fo-counter"
CLIENT = "fo-caller"
REPLICAS = 3


class Lines:
    """A process's stderr lines, each with the wall-clock time it was read."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self.cond = threading.Condition()

    def write(self, line: str) -> None:
        with self.cond:
            self.lines.append((time.time(), line.rstrip("\n")))
            self.cond.notify_all()

    def flush(self) -> None:
        pass

    def count(self, text: str) -> int:
        with self.cond:
            return sum(1 for _, ln in self.lines if text in ln)

    def nth(self, text: str, n: int) -> tuple[float, str] | None:
        """The ``n``-th line (from 1) holding ``text``, with its time."""
        with self.cond:
            hits = [tl for tl in self.lines if text in tl[1]]
        return hits[n - 1] if len(hits) >= n else None

    def tail(self, k: int = 15) -> str:
        with self.cond:
            return "\n".join(ln for _, ln in self.lines[-k:])


def _copy(stream: Any, dest: Lines) -> None:
    with stream:
        for line in stream:
            dest.write(line)


def wait_until(cond: Any, what: str, limit: float = 60.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(0.002)


class ReplicaSet:
    """The server's replicas and the caller, in ``tmp`` (its own registry)."""

    def __init__(self, tmp: Path, log_store: str = "", replicas: int = REPLICAS,
                 lease_ms: int = 1000) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.log_store = log_store
        self.replicas = replicas
        self.env = dict(os.environ, AMBROSIA_HOME=str(self.home), PYTHONUNBUFFERED="1",
                        FO_SERVER=SERVER, FO_STOP=str(tmp / "stop"),
                        FO_REPLIES=str(tmp / "replies"))
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), str(ROOT), str(ROOT / "ic-harness"),
                        os.environ.get("PYTHONPATH", "")) if p)
        rp, sp, ip = free_ports(3)
        registry.register(instance_name=SERVER, receive_port=rp, send_port=sp, ic_port=ip,
                          log_dir=tmp / "logs", active_active=True, log_store=log_store,
                          lease_ms=lease_ms, home=self.home)
        for n in range(1, replicas):
            rp, sp, ip = free_ports(3)
            registry.add_replica(instance_name=SERVER, replica=n, receive_port=rp,
                                 send_port=sp, ic_port=ip, home=self.home)
        rp, sp, ip = free_ports(3)
        registry.register(instance_name=CLIENT, receive_port=rp, send_port=sp, ic_port=ip,
                          log_dir=tmp / "logs", home=self.home)
        self.ics: dict[int, subprocess.Popen[str]] = {}
        self.bindings: dict[int, subprocess.Popen[str]] = {}
        self.ic_lines: dict[int, Lines] = {}
        self.binding_lines: dict[int, Lines] = {}
        self.others: list[subprocess.Popen[str]] = []
        self.client_lines = Lines()
        self.replies = tmp / "replies"

    # ------------------------------------------------------------------ processes
    def _run(self, target: str, name: str, ports: tuple[int, int], out: Lines
             ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ambrosia_cli", "run", target, "-i", name,
             "--receive-port", str(ports[0]), "--send-port", str(ports[1])],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=self.env, cwd=HERE, text=True)
        threading.Thread(target=_copy, args=(proc.stderr, out), daemon=True).start()
        return proc

    def start_replica(self, n: int) -> None:
        self.ic_lines[n] = Lines()
        self.binding_lines[n] = Lines()
        self.ics[n] = launch.start_coordinator(SERVER, n, env=self.env, home=self.home,
                                               stderr=self.ic_lines[n])
        rep = registry.replica(registry.load(SERVER, self.home), n, self.home)
        self.bindings[n] = self._run("failover_apps:Counter", SERVER,
                                     (rep.receive_port, rep.send_port), self.binding_lines[n])

    def start_client(self) -> None:
        reg = registry.load(CLIENT, self.home)
        ic = launch.start_coordinator(CLIENT, env=self.env, home=self.home,
                                      stderr=self.client_lines)
        self.others.append(ic)
        self.others.append(self._run("failover_apps:Caller", CLIENT,
                                     (reg.receive_port, reg.send_port), self.client_lines))

    def primary(self) -> int | None:
        n = current_primary(registry.instance_dir(registry.load(SERVER, self.home))).get(
            "replica")
        return n if isinstance(n, int) else None

    def reply_times(self) -> list[float]:
        try:
            text = self.replies.read_text()
        except FileNotFoundError:
            return []
        return [float(ln.split()[1]) for ln in text.splitlines()
                if ln and ln[0].isdigit() and len(ln.split()) == 2]

    def stop(self) -> None:
        for p in [*self.bindings.values(), *self.ics.values(), *self.others]:
            kill_process(p, group=False)

    # ------------------------------------------------------------------ the run
    def start(self) -> None:
        self.start_replica(0)
        wait_until(lambda: self.binding_lines[0].count("became primary"), "first start")
        for n in range(1, self.replicas):
            self.start_replica(n)
        self.start_client()
        wait_until(lambda: len(self.reply_times()) > 20, "the caller's first replies")

    def kill(self, what: str) -> dict[str, Any]:
        """``kill -9`` of the primary's ``what`` ("coordinator" or "binding"); returns the
        time to the first reply from the new primary and the new primary's account of
        its takeover (the coordinator's "took over" line)."""
        old = wait_until(lambda: (p := self.primary()) is not None and p + 1, "a primary") - 1
        seen = len(self.reply_times())
        wait_until(lambda: len(self.reply_times()) > seen + 20, "replies before the kill")
        victim = self.ics[old] if what == "coordinator" else self.bindings[old]
        t0 = time.time()
        victim.send_signal(signal.SIGKILL)
        new = wait_until(lambda: (p := self.primary()) is not None and p != old and p + 1,
                         "a new primary") - 1
        became = self.binding_lines[new]
        mark = wait_until(lambda: became.nth("became primary", 1), "the binding's takeover")
        t_first = wait_until(lambda: next((t for t in self.reply_times() if t > mark[0]),
                                          None), "a reply from the new primary")
        took = self.ic_lines[new].nth("took over", 1)
        out = {"seconds": t_first - t0, "became": mark[0] - t0, "from": old, "to": new,
               "account": took[1] if took else ""}
        for p in (self.ics[old], self.bindings[old]):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        self.start_replica(old)
        wait_until(lambda: self.ic_lines[old].count("following"), "the standby following")
        return out

    def finish(self) -> int:
        """Stop the caller; check every reply. Returns the number of requests."""
        (self.tmp / "stop").write_text("")
        text = wait_until(lambda: (t := self.replies.read_text()) and "done " in t and t,
                          "the caller's last reply", 120)
        return check_replies(text)


def check_replies(text: str) -> int:
    """The number of requests in a finished caller's replies file.

    Raises:
        RuntimeError: it reports a wrong reply or state, or misses or repeats a reply.
    """
    lines = text.splitlines()
    errors = [ln for ln in lines if ln.startswith("error")]
    numbers = [int(ln.split()[0]) for ln in lines if ln and ln[0].isdigit()]
    done = [int(ln.split()[1]) for ln in lines if ln.startswith("done ")]
    if errors or len(done) != 1 or numbers != list(range(1, done[0] + 1)):
        raise RuntimeError(f"the caller's replies are wrong: {errors[:3]} ({len(numbers)} "
                           f"replies, done {done})")
    return done[0]


def measure(tmp: Path, log_store: str, kills: list[str], lease_ms: int = 1000
            ) -> dict[str, Any]:
    """One replica set; one kill per item of ``kills``. Returns the samples per kind."""
    rs = ReplicaSet(tmp, log_store, lease_ms=lease_ms)
    out: dict[str, Any] = {k: [] for k in set(kills)}
    try:
        rs.start()
        for what in kills:
            out[what].append(rs.kill(what))
        out["requests"] = rs.finish()
    except BaseException:
        for n in rs.ics:
            print(f"--- replica {n} coordinator\n{rs.ic_lines[n].tail()}\n--- binding\n"
                  f"{rs.binding_lines[n].tail()}", file=sys.stderr)
        print(f"--- caller\n{rs.client_lines.tail()}", file=sys.stderr)
        raise
    finally:
        rs.stop()
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0
