"""Modules share no private names: what another module needs is public (the package
dependencies themselves are import-linter's contracts in ``pyproject.toml``, checked by
``make lint`` and ``make test``)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ambrosia_py.immortal import Immortal
from ambrosia_py.methods import StateForm
from ambrosia_py.runtime import Engine

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (ROOT / "ambrosia_core", ROOT / "ambrosia_py", ROOT / "ic-harness" / "ambrosia_ic",
            ROOT / "ambrosia_cli", ROOT / "services" / "ambrosia_services")


def _is_private(name: str) -> bool:
    # Dunder names such as ``__version__`` are public.
    return name.startswith("_") and not name.endswith("__")


def _private_imports(path: Path, root: Path) -> list[str]:
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    return _private_imports_in(path.read_text(), str(path.relative_to(ROOT)), module)


def _private_imports_in(source: str, where: str, module: str) -> list[str]:
    """Imports in ``source`` (the module ``module``) of what another module keeps
    private: ``from MODULE import _name``, or a private module, ``from x._y import z``,
    ``import x._y``. A private module is its package's: the package's modules and those
    of its subpackages may import it (``from . import _y``, ``from .._y import z``)."""
    package = module.split(".")[:-1]  # where a relative import starts (``__init__``: itself)

    def foreign(parts: list[str]) -> bool:
        """Whether the dotted ``parts`` pass a private module ``module`` is not inside."""
        return any(_is_private(name) and package[:i] != parts[:i]
                   for i, name in enumerate(parts))

    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            shown = f"from {'.' * node.level}{node.module or ''}"
            if foreign(target):
                found.append(f"{where}:{node.lineno}: {shown} import ...")
            found += [f"{where}:{node.lineno}: {shown} import {alias.name}"
                      for alias in node.names
                      if _is_private(alias.name) and package[: len(target)] != target]
        elif isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno}: import {alias.name}" for alias in node.names
                      if foreign(alias.name.split("."))]
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    found = [hit for pkg in PACKAGES for path in sorted(pkg.rglob("*.py"))
             for hit in _private_imports(path, pkg.parent)]
    assert found == []


def test_the_private_import_check_sees_private_modules_and_spares_a_packages_own() -> None:
    source = "\n".join([
        "from . import _own",
        "from ._own import name",
        "from .. import _parent",
        "from pkg._parent import name",
        "from pkg import __version__",
        "import pkg.mod",
        "from other._mod import name",
        "import other._mod",
        "import pkg.sub2._mod.x as alias",
        "from ..sub2._mod import name",
        "from .mod import _name",
        "from ._own import _name",
    ])
    assert _private_imports_in(source, "m.py", "pkg.sub.m") == [
        "m.py:7: from other._mod import ...",
        "m.py:8: import other._mod",
        "m.py:9: import pkg.sub2._mod.x",
        "m.py:10: from ..sub2._mod import ...",
        "m.py:11: from .mod import _name",
        "m.py:12: from ._own import _name",
    ]


def _hidden_imports(path: Path) -> list[str]:
    """``importlib.import_module("pkg...")`` / ``__import__("pkg...")`` of one of the
    project's packages: an import the contracts cannot see."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if (name in ("import_module", "__import__") and isinstance(arg, ast.Constant)
                    and str(arg.value).startswith(("ambrosia_core", "ambrosia_py", "ambrosia_ic",
                                                   "ambrosia_cli", "ambrosia_services"))):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {arg.value}")
    return found


def test_no_module_imports_a_package_of_the_project_behind_the_linters_back() -> None:
    found = [hit for pkg in PACKAGES for path in sorted(pkg.rglob("*.py"))
             for hit in _hidden_imports(path)]
    assert found == []


# ---------------------------------------------------------------- the API/runtime arrow
def _runtime_imports_of_the_api(path: Path) -> list[str]:
    """Imports of ``ambrosia_py.immortal`` or ``ambrosia_py.context`` in a runtime module,
    under ``TYPE_CHECKING`` too (import-linter counts those as well)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 2:  # from the runtime package: `..x` is ambrosia_py.x
                base = f"ambrosia_py.{base}" if base else "ambrosia_py"
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        if any(n in ("ambrosia_py.immortal", "ambrosia_py.context") for n in names):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_runtime_imports_nothing_of_the_api() -> None:
    runtime = ROOT / "ambrosia_py" / "runtime"
    found = [hit for path in sorted(runtime.rglob("*.py"))
             for hit in _runtime_imports_of_the_api(path)]
    assert found == []


def test_the_layers_contracts_ignore_no_import() -> None:
    """The shared core's, the binding's and the coordinator's layers, and those inside the
    coordinator's package (no circle among its modules), hold with no exception granted."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = {(c.get("containers") or [c["layers"][-1].split(".")[0]])[0]:
              c.get("ignore_imports", []) for c in contracts if c["type"] == "layers"}
    assert layers == {"ambrosia_core": [], "ambrosia_py": [], "ambrosia_ic": [],
                      "ambrosia_ic.coordinator": []}


# ---------------------------------------------------------------- no circles
def _lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """import-linter on the source under ``cwd`` (never its cache: a cache written under
    another configuration can answer for files that changed since)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(cwd), str(cwd / "ic-harness"), str(cwd / "services"),
         os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache",
                           "--no-logo", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _circles_contract() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"]
                  if c.get("id") == "no-circles"]
    return contract


def test_no_module_or_package_of_ours_imports_one_that_imports_it_back() -> None:
    """The circles contract covers every shipped package, grants no exception, and holds."""
    contract = _circles_contract()
    assert sorted(contract["ancestors"]) == sorted(p.name for p in PACKAGES)
    assert "ignore_imports" not in contract and "skip_descendants" not in contract
    result = _lint_imports(ROOT, "--contract", "no-circles")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_circles_contract_sees_imports_made_late_or_for_types_only(tmp_path: Path) -> None:
    """The contract, as configured, refuses the circles the house once had: a module
    starting another from inside a function while that one imports it back (the status
    command and its page), and a module naming its user under TYPE_CHECKING (a
    coordinator's counts and the Coordinator)."""
    pkg = tmp_path / "house"
    (pkg / "cli").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "cli" / "__init__.py"):
        init.write_text("")
    (pkg / "cli" / "status.py").write_text(
        "def main():\n    from .status_page import serve\n    return serve\n")
    (pkg / "cli" / "status_page.py").write_text("from .status import main\n")
    (pkg / "stats.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .lifecycle import C\n")
    (pkg / "lifecycle.py").write_text("from .stats import *\nclass C: ...\n")
    contract = {**_circles_contract(), "ancestors": ["house"]}
    lines = ["[tool.importlinter]", 'root_packages = ["house"]', "",
             "[[tool.importlinter.contracts]]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in contract.items()]
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No cycles are allowed in house.cli." in result.stdout
    assert "No cycles are allowed in house." in result.stdout


def test_each_class_records_how_its_state_is_checkpointed() -> None:
    class Attributes(Immortal):
        pass

    class AsObject(Immortal):
        def checkpoint_state(self) -> int:
            return 1

        def load_state(self, state: int) -> None:
            pass

    class AsStream(Immortal):
        def checkpoint_producer(self) -> Iterator[bytes]:
            yield b""

        def checkpoint_consumer(self, chunks: Iterator[bytes]) -> None:
            pass

    class StreamChild(AsStream):
        pass

    forms = [c.__ambrosia_state_form__ for c in (Immortal, Attributes, AsObject, AsStream,
                                                 StreamChild)]
    assert forms == [StateForm.ATTRIBUTES, StateForm.ATTRIBUTES, StateForm.OBJECT,
                     StateForm.STREAM, StateForm.STREAM]


def test_the_engine_runs_only_classes_the_api_built() -> None:
    with pytest.raises(TypeError) as e:
        Engine(object, "x")  # type: ignore[arg-type]
    assert str(e.value) == "<class 'object'> is not an Immortal subclass"

    class Fine(Immortal):
        pass

    with pytest.raises(TypeError) as e:
        Engine(Fine, "x", upgrade_to=int)  # type: ignore[arg-type]
    assert str(e.value) == "<class 'int'> is not an Immortal subclass"
    assert Engine(Fine, "x").cls is Fine


@pytest.mark.parametrize(("module", "absent"), [
    # The coordinator and the binding share the core (wire format, errors, loops); the
    # coordinator loads nothing of the binding, not even its errors.
    ("ambrosia_ic.coordinator", ["ambrosia_py", "cattrs"]),
    ("ambrosia_core.wire", ["ambrosia_py", "ambrosia_ic", "msgpack", "cattrs"]),
    # The standalone sink speaks the connector protocol; the coordinator immortal beside
    # that library is not its business.
    ("ambrosia_services.connectors.clients.filesink", ["ambrosia_services.connectors.coordinator",
                                              "ambrosia_py.immortal", "ambrosia_py.runtime"]),
])
def test_a_package_face_loads_only_what_its_module_needs(module: str,
                                                         absent: list[str]) -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", f"import sys, {module}; print(*sys.modules, sep='\\n')"],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    assert module in loaded
    assert [m for m in loaded if any(m == a or m.startswith(f"{a}.") for a in absent)] == []


def test_the_lazy_faces_still_give_every_public_name() -> None:
    import ambrosia_services.connectors
    from ambrosia_services.connectors.coordinator import ConnectorCoordinator

    from ambrosia_py import Immortal, StopReason, rpc
    from ambrosia_py.immortal import Immortal as Defined

    assert Immortal is Defined and callable(rpc) and StopReason.STOPPED
    assert ambrosia_services.connectors.ConnectorCoordinator is ConnectorCoordinator
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        ambrosia_services.connectors.Nope  # noqa: B018
