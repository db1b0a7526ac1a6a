"""A JS-style peer with its own coordinator, and `ambrosia run` immortals, in one home."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic import launch, registry

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess, start_immortal
from tests.ic.rawbinding import RawBinding

from .jspeer import JsStylePeer

ROOT = Path(__file__).resolve().parents[2]


class Interop:
    def __init__(self, tmp: Path) -> None:
        self.home = tmp / "home"
        self.home.mkdir()
        self.tmp = tmp
        self.procs: list[Any] = []
        self.immortals: list[ImmortalProcess] = []
        self.bindings: list[RawBinding] = []
        self.files: list[Any] = []

    def start_peer(self, name: str, **handlers: Any) -> JsStylePeer:
        rp, sp, icp = free_ports(3)
        reg = registry.register(instance_name=name, receive_port=rp, send_port=sp,
                                ic_port=icp, log_dir=self.home / "logs", home=self.home)
        err = open(self.tmp / f"{name}-ic.err", "w")  # noqa: SIM115 - closed in close()
        self.files.append(err)
        self.procs.append(launch.start_coordinator(name, home=self.home, stderr=err))
        binding = RawBinding(reg.receive_port, reg.send_port)
        self.bindings.append(binding)
        peer = JsStylePeer(binding, name, handlers).start()
        peer.wait(lambda: peer.primary and peer.initial_echo is not None, "the peer primary")
        return peer

    def start_immortal(self, target: str, name: str) -> ImmortalProcess:
        p = start_immortal(target, name, home=self.home, cwd=ROOT)
        self.immortals.append(p)
        return p

    def close(self) -> None:
        for p in self.immortals:
            p.kill()
        for b in self.bindings:
            b.close()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for f in self.files:
            f.close()


@pytest.fixture
def interop(tmp_path: Path) -> Iterator[Interop]:
    env = Interop(tmp_path)
    try:
        yield env
    finally:
        env.close()
