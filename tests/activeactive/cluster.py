"""A replicated server instance ``S`` (active/active, replicas 0..n-1, each a raw test
binding running the deterministic CounterApp) and a standalone client ``C`` that
streams numbered calls to it."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from ambrosia_ic import registry
from ambrosia_ic.lease import current_primary

from tests.ic.conftest import Harness
from tests.ic.rawbinding import CounterApp, Driver
from tests.launcher import NeverHappenedError, wait_until


class Cluster:
    def __init__(self, h: Harness, replicas: int = 3, **kw: object) -> None:
        self.h = h
        h.register("S", active_active=True, **kw)
        for n in range(1, replicas):
            h.add_replica("S", n)
        h.register("C")
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.drivers: dict[int, Driver] = {}
        self.client: Driver | None = None
        self.client_proc: subprocess.Popen[str] | None = None
        self.sent = 0
        self._stop = threading.Event()
        self._pump: threading.Thread | None = None

    @property
    def dir(self) -> Path:
        return registry.instance_dir(self.h.reg("S"))

    def start_replica(self, n: int, driver: Driver | None = None) -> Driver:
        self.procs[n] = self.h.start("S", n)
        d = driver or Driver(self.h.connect("S", n), CounterApp("S"))
        self.drivers[n] = d.start() if not d.thread.is_alive() else d
        return d

    def start_client(self) -> Driver:
        self.client_proc = self.h.start("C")
        self.client = self.h.drive("C", peer="S")
        wait_until(self.client.primary.is_set, "client primary")
        return self.client

    def primary(self) -> int:
        """The replica named by the newest epoch file."""
        info = wait_until(lambda: current_primary(self.dir), "a primary")
        return int(info["replica"])

    def wait_primary(self, not_: int | None = None) -> int:
        def ready() -> int | None:
            info = current_primary(self.dir)
            n = info.get("replica")
            if n is None or n == not_ or n not in self.drivers:
                return None
            return int(n) + 1 if self.drivers[n].primary.is_set() else None

        return int(wait_until(ready, "a new primary")) - 1

    def wait(self, cond: Any, what: str, limit: float = 60.0) -> Any:
        """``wait_until``, and if it gives up, what every process of the cluster said
        last (a failure on a busy machine then shows where it stood)."""
        try:
            return wait_until(cond, what, limit)
        except NeverHappenedError as e:
            raise NeverHappenedError(f"{e}\n{self.said()}") from None

    def said(self, lines: int = 8) -> str:
        """The last ``lines`` lines of each coordinator's stderr (client included)."""
        procs = [(f"replica {n}", p) for n, p in sorted(self.procs.items())]
        if self.client_proc is not None:
            procs.append(("client", self.client_proc))
        out = []
        for who, p in procs:
            try:
                tail = self.h.stderr_of(p).splitlines()[-lines:]
            except (KeyError, OSError):
                tail = ["(no stderr)"]
            state = "running" if p.poll() is None else f"exited {p.returncode}"
            out.append(f"--- {who} ({state}):\n" + "\n".join(tail))
        return "\n".join(out)

    def kill9(self, n: int) -> None:
        self.h.kill9(self.procs[n])
        self.drivers[n].thread.join(30)

    # ------------------------------------------------------------------ load
    def start_pump(self, pause: float = 0.002) -> None:
        assert self.client is not None
        client = self.client

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

    def received_by(self, n: int) -> list[str]:
        return self.drivers[n].snapshot()["received"]

    def settled(self, n: int) -> bool:
        assert self.client is not None
        c = self.client.snapshot()
        return len(c["sent"]) == self.sent and c["acked"] == c["sent"] and (
            self.received_by(n) == c["sent"])

    def check_exactly_once(self, n: int) -> list[str]:
        """Every numbered call applied exactly once, in order, by the primary ``n``."""
        assert self.client is not None
        wait_until(lambda: self.settled(n), "every call applied and acknowledged", 120)
        c = self.client.snapshot()
        expected = [f"C:{k}" for k in range(self.sent)]
        assert c["sent"] == expected
        assert self.received_by(n) == expected
        assert c["acked"] == expected
        assert self.client.error is None
        for d in self.drivers.values():
            assert d.error is None
        return expected
