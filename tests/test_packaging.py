"""What the distribution installs beyond the code: type information, the command."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_ships_py_typed() -> None:
    # PEP 561: without the marker, type checkers of the users' code ignore our annotations.
    data = dict(PYPROJECT["tool"]["setuptools"]["package-data"])
    # The other entry: the Java sources of the staged-records Spark source (the plain
    # install test checks that they are shipped).
    assert data.pop("ambrosia_services.jobs.spark") == ["java/**/*.java",
                                                         "java/META-INF/services/*"]
    # And the live status page's files, which must be there to be shipped.
    assert data.pop("ambrosia_cli") == ["py.typed", "page/*"]
    assert {p.name for p in (ROOT / "ambrosia_cli" / "page").iterdir()} >= {
        "index.html", "page.js", "page.css"}
    data["ambrosia_cli"] = ["py.typed"]
    packages = {"ambrosia_core": ROOT, "ambrosia_py": ROOT, "ambrosia_ic": ROOT / "ic-harness",
                "ambrosia_cli": ROOT, "ambrosia_services": ROOT / "services"}
    assert data == {name: ["py.typed"] for name in packages}
    assert [(p / name / "py.typed").is_file() for name, p in packages.items()] == [True] * 5


def test_the_ambrosia_command_is_the_command_package() -> None:
    assert PYPROJECT["project"]["scripts"] == {
        "ambrosia": "ambrosia_cli.main:main",
        "ambrosia-feed": "ambrosia_services.connectors.clients.feed:main",  # the connector clients
        "ambrosia-sink": "ambrosia_services.connectors.clients.filesink:main",
        "ambrosia-pgsink": "ambrosia_services.connectors.clients.pgsink:main",
    }
    assert "ambrosia_cli" in PYPROJECT["tool"]["mypy"]["packages"]
    assert "import-linter>=2.0" in PYPROJECT["project"]["optional-dependencies"]["dev"]
