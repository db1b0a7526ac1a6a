from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ambrosia_py.testing import ImmortalProcess, start_immortal

ROOT = Path(__file__).resolve().parents[2]


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
