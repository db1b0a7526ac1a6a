"""Helpers shared by the suites that run immortals as processes: the repository's root,
a launcher of `ambrosia run` processes (and its fixture, which a suite's conftest imports),
and a wait for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ambrosia_py.testing import ImmortalProcess, start_immortal

ROOT = Path(__file__).resolve().parents[1]


class Launcher:
    """Starts `ambrosia run` processes in one test's AMBROSIA_HOME; kills them all after."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.procs: list[ImmortalProcess] = []

    def start(self, target: str, name: str, **kw: object) -> ImmortalProcess:
        p = start_immortal(target, name, home=self.home, cwd=ROOT, **kw)  # type: ignore[arg-type]
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:
            p.kill()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    home = tmp_path / "home"
    home.mkdir()
    lau = Launcher(home)
    try:
        yield lau
    finally:
        lau.close()


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the condition did not become true")
        time.sleep(0.05)
