"""Modules share no private names: what another module needs is public (the package
dependencies themselves are import-linter's contracts in ``pyproject.toml``, checked by
``make lint`` and ``make test``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (ROOT / "ambrosia_py", ROOT / "ic-harness" / "ambrosia_ic", ROOT / "ambrosia_cli")


def _private_imports(path: Path) -> list[str]:
    """``from MODULE import _name`` in ``path``: a private name taken from another module
    (dunder names such as ``__version__`` are public)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.endswith("__"):
                    # `from . import _module` is a package using its own private module.
                    if node.module is None and node.level == 1:
                        continue
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: "
                                 f"from {'.' * node.level}{node.module or ''} import {name}")
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    found = [hit for pkg in PACKAGES for path in sorted(pkg.rglob("*.py"))
             for hit in _private_imports(path)]
    assert found == []



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
                    and str(arg.value).startswith(("ambrosia_py", "ambrosia_ic",
                                                   "ambrosia_cli", "services"))):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {arg.value}")
    return found


def test_no_module_imports_a_package_of_the_project_behind_the_linters_back() -> None:
    found = [hit for pkg in PACKAGES for path in sorted(pkg.rglob("*.py"))
             for hit in _hidden_imports(path)]
    assert found == []
