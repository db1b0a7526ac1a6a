"""Fixtures for the coordinator tests: a private registry, free ports, coordinator
processes that are always killed in teardown."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic import launch, registry

from ambrosia_core.processes import kill_process

from .rawbinding import CounterApp, Driver, RawBinding


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.home = tmp / "home"
        self.logs = tmp / "logs"
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []
        self.files: list[Any] = []
        self.stderr_paths: dict[int, Path] = {}
        self.starts = 0
        self.bindings: list[RawBinding] = []
        self.env = dict(os.environ, AMBROSIA_HOME=str(self.home))
        self.options: list[str] = []  # every coordinator's (``start``)

    def register(self, name: str, **kw: Any) -> registry.Registration:
        rp, sp, ip = registry.unregistered_free_ports(3, self.home)
        return registry.register(instance_name=name, receive_port=rp, send_port=sp,
                                 ic_port=ip, log_dir=self.logs, home=self.home, **kw)

    def reg(self, name: str) -> registry.Registration:
        return registry.load(name, self.home)

    def add_replica(self, name: str, n: int, **kw: Any) -> registry.Replica:
        rp, sp, ip = registry.unregistered_free_ports(3, self.home)
        return registry.add_replica(instance_name=name, replica=n, receive_port=rp,
                                    send_port=sp, ic_port=ip, home=self.home, **kw)

    def start(self, name: str, replica: int = 0,
              options: Sequence[str] = ()) -> subprocess.Popen[str]:
        """Start the coordinator of ``name`` with ``options`` and this harness's own
        (``self.options``: TLS, for the tests run both ways)."""
        self.starts += 1
        err = open(self.tmp / f"{name}-{self.starts}.err", "w")  # noqa: SIM115
        self.files.append(err)
        try:
            proc = launch.start_coordinator(name, replica, home=self.home, stderr=err,
                                            options=[*self.options, *options])
        finally:
            err.flush()
        self.procs.append(proc)
        self.stderr_paths[proc.pid] = Path(err.name)
        return proc

    def stderr_of(self, proc: subprocess.Popen[str]) -> str:
        return self.stderr_paths[proc.pid].read_text()

    def kill9(self, proc: subprocess.Popen[str]) -> None:
        kill_process(proc, group=False)  # the coordinators share the tests' process group

    def cli(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ambrosia_cli", *args], env=self.env,
                              capture_output=True, text=True, timeout=120, **kw)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "ambrosia_cli", *args], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def connect(self, name: str, replica: int = 0) -> RawBinding:
        rep = registry.replica(self.reg(name), replica, self.home)
        b = RawBinding(rep.receive_port, rep.send_port)
        self.bindings.append(b)
        return b

    def drive(self, name: str, peer: str = "", replica: int = 0) -> Driver:
        return Driver(self.connect(name, replica), CounterApp(name, peer)).start()

    def instance_dir(self, name: str) -> Path:
        return registry.instance_dir(self.reg(name))

    def close(self) -> None:
        for b in self.bindings:
            b.close()
        for p in self.procs:
            kill_process(p, group=False)
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
        for f in self.files:
            f.close()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    try:
        yield h
    finally:
        h.close()
