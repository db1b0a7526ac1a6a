"""The coordinator's core answers one way: events in (method calls), actions out. Read
from the code: nothing outside the core assigns a field of it (the asyncio shell, the
replicas and the simulator call an event instead), no shell property merely mirrors one,
and every event of the core returns nothing (its effects are actions)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from ambrosia_ic.coordinator.core import CoordinatorCore

ROOT = Path(__file__).resolve().parents[2]
# Everything that drives a core: the coordinator's package and the simulator.
SHELLS = sorted([*(ROOT / "ic-harness" / "ambrosia_ic").rglob("*.py"),
                 *(ROOT / "tests" / "sim").glob("*.py")])
# What a caller may ask of the core and get an answer: queries, and the one pull of the
# commit's hot path (``take``: the next record to write).
QUERIES = {"logged", "take", "take_actions", "snapshot", "position", "outbox",
           "checkpoint_expected"}


def _through_core(node: ast.expr) -> bool:
    """Whether ``node`` (an assignment's target object) is the core or a part of it:
    ``core``, ``c.core``, ``self.c.core.group``..."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr == "core":
            return True
        node = node.value
    return isinstance(node, ast.Name) and node.id == "core"


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in ("setattr", "delattr") and node.args):
        return [ast.Attribute(node.args[0], "?", ast.Store(), lineno=node.lineno)]
    else:
        return []
    out: list[ast.expr] = []
    while found:
        t = found.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            found.extend(t.elts)
        elif isinstance(t, ast.Starred):
            found.append(t.value)
        else:
            out.append(t)
    return out


def core_writes(source: str) -> list[int]:
    """The lines of ``source`` that assign (or set, or delete) an attribute or an item
    of a coordinator core from outside it."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        for t in _targets(node):
            if isinstance(t, (ast.Attribute, ast.Subscript)) and _through_core(t.value):
                lines.append(t.lineno)
    return sorted(lines)


def core_mirrors(source: str) -> list[int]:
    """The lines of properties whose whole body returns a field of the core."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.FunctionDef)
                and any(isinstance(d, ast.Name) and d.id == "property"
                        for d in node.decorator_list)):
            body = [s for s in node.body if not (isinstance(s, ast.Expr)
                                                 and isinstance(s.value, ast.Constant))]
            if (len(body) == 1 and isinstance(body[0], ast.Return)
                    and isinstance(body[0].value, ast.Attribute)
                    and _through_core(body[0].value.value)):
                lines.append(node.lineno)
    return lines


def test_the_checks_see_what_they_look_for() -> None:
    assert core_writes("c.core.who = 'x'\nself.core.group.next_seq = 3\n"
                       "core.digest, n = d, 1\nself.c.core.group.inputs['a'] += 1\n"
                       "setattr(c.core, 'wake', False)\nself.core = CoordinatorCore()\n"
                       "core = c.core\nc.who = 'x'\n") == [1, 2, 3, 4, 5]
    assert core_mirrors("class C:\n    @property\n    def who(self):\n"
                        "        '''doc'''\n        return self.core.who\n"
                        "    @property\n    def n(self):\n        return self.n\n") == [3]


def test_nothing_outside_the_core_assigns_its_fields_or_mirrors_them() -> None:
    found = {}
    for path in SHELLS:
        source = path.read_text()
        bad = core_writes(source) + core_mirrors(source)
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert not found, f"the core's fields written or mirrored from outside it: {found}"


def test_every_event_of_the_core_returns_nothing() -> None:
    answering = []
    for name, fn in inspect.getmembers(CoordinatorCore, inspect.isfunction):
        if name.startswith("_") or name in QUERIES:
            continue
        if inspect.signature(fn).return_annotation not in ("None", None):
            answering.append(name)
    assert not answering, f"events that answer other than by actions: {answering}"
