"""Every console script (``[project.scripts]`` in pyproject.toml) describes itself in its
``--help``, and so does each of its sub-commands; every option and argument has a help
text, and an option with a default worth saying says it."""

from __future__ import annotations

import argparse
import importlib
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())[
    "project"]["scripts"]


class _Captured(BaseException):
    """Carries the parser out of a command's main, past any ``except Exception``."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def parser_of(main: Callable[..., Any], argv: list[str], monkeypatch: pytest.MonkeyPatch,
              prog: str | None = None) -> argparse.ArgumentParser:
    """The parser ``main(argv)`` parses its arguments with: the first one, or the one
    named ``prog`` (the parsers before it parse as usual)."""
    parse = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        if prog is None or self.prog == prog:
            raise _Captured(self)
        return parse(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", capture)
        try:
            main(argv)
        except _Captured as got:
            return got.parser
    raise AssertionError(f"{prog or main.__qualname__} parsed no arguments")


def commands(parser: argparse.ArgumentParser) -> Iterator[
        tuple[argparse.ArgumentParser, argparse.Action | None]]:
    """``parser`` and every sub-command's parser under it, each with the pseudo-action
    that holds its one-line help (None for ``parser``)."""
    yield parser, None
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                for found, said in commands(sub):
                    yield found, said if said is not None else choice


def forwards(parser: argparse.ArgumentParser) -> bool:
    """A sub-command that hands its arguments to a parser of its own (``ambrosia run``)."""
    return any(a.nargs == argparse.REMAINDER for a in parser._actions)


def _says_default(action: argparse.Action) -> bool:
    default = action.default
    if default in (None, False, "", [], ()) or isinstance(action, argparse._StoreTrueAction):
        return True
    if action.choices is not None or not action.option_strings:
        return True
    help_text = action.help or ""
    return "default" in help_text or "$" in help_text


def problems(parser: argparse.ArgumentParser) -> list[str]:
    found = []
    parser.format_help()  # a help text that does not format fails here
    if not (parser.description or "").strip():
        found.append(f"{parser.prog}: no description")
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        if not action.help or action.help == argparse.SUPPRESS:
            found.append(f"{parser.prog} {name}: no help")
        elif not _says_default(action):
            found.append(f"{parser.prog} {name}: its default ({action.default!r}) is not said")
    return found


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_command_describes_itself_and_every_option(
        script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module, _, func = SCRIPTS[script].partition(":")
    main = getattr(importlib.import_module(module), func)
    top = parser_of(main, ["--help"], monkeypatch)
    found: list[str] = []
    for parser, said in commands(top):
        if said is not None and not said.help:
            found.append(f"{parser.prog}: no one-line help in {top.prog} --help")
        if forwards(parser):
            name = parser.prog.rpartition(" ")[2]
            parser = parser_of(main, [name, "--help"], monkeypatch, prog=parser.prog)
        found += problems(parser)
    assert found == []


# Tuning that no user has a reason to turn, once options of the services' commands: each is
# a module constant or a constructor argument now, with its reason beside it (the job
# link's credit and batch are agreed in its hello). Renamed ones took the name the other
# commands use for the same thing.
SERVICES_COMMANDS = [
    "ambrosia_services.connectors.clients.feed", "ambrosia_services.connectors.clients.filesink",
    "ambrosia_services.connectors.clients.pgsink", "ambrosia_services.jobs.runner",
    "ambrosia_services.jobs.spark.server",
]
DROPPED = {"--credits", "--batch-bytes", "--max-connections", "--frame-seconds",
           "--backoff-cap", "--poll-interval", "--max-pending-bytes", "--max-frame-size",
           "--handshake-timeout", "--instance", "--port", "--log", "--out"}


@pytest.mark.parametrize("module", SERVICES_COMMANDS)
def test_the_services_commands_offer_no_tuning_knobs(
        module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = parser_of(importlib.import_module(module).main, ["--help"], monkeypatch)
    offered = {o for action in parser._actions for o in action.option_strings}
    assert offered & DROPPED == set()


# Every command a user runs: the console scripts, and the `python -m` entry points the
# READMEs give (the binding's own, a local Raft cluster, the job runner, the Spark server).
MODULE_COMMANDS = [
    "ambrosia_py.runtime.cli:main", "ambrosia_ic.cli:main", "ambrosia_ic.raft.cluster:main",
    "ambrosia_services.jobs.runner:main", "ambrosia_services.jobs.spark.server:main",
    "ambrosia_services.jobs.spark.jar:main",
]
SHIPPED = ["ambrosia_core", "ambrosia_py", "ambrosia_cli", "ic-harness/ambrosia_ic",
           "services/ambrosia_services"]
# The most long options the commands may offer between them, counting each once by its
# first spelling (the real IC's camelCase aliases are not more to learn).
MOST_OPTIONS = 55
# Options dropped since: tuning with a constant and its reason in their place, or a second
# spelling of what another command names otherwise (the new name in the comment).
DROPPED_EVERYWHERE = {
    "--ic-receive-port", "--ic-send-port",  # -rp/--receive-port, -sp/--send-port
    "--to", "--member", "--name", "--conf",  # --connect, --instance-name, --set
    "--serve", "--version",  # --listen (a server's address), -cv/--current-version
    "--days", "--renew", "--timeout", "--lease-ms", "--state-table",
}


def _entry_points() -> list[str]:
    return sorted(SCRIPTS.values()) + MODULE_COMMANDS


def long_options(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Each long option any command offers (by its first long spelling) -> its spellings."""
    found: dict[str, set[str]] = {}
    for entry in _entry_points():
        module, _, func = entry.partition(":")
        main = getattr(importlib.import_module(module), func)
        for parser, _said in commands(parser_of(main, ["--help"], monkeypatch)):
            if forwards(parser):
                parser = parser_of(main, [parser.prog.rpartition(" ")[2], "--help"],
                                   monkeypatch, prog=parser.prog)
            for action in parser._actions:
                spelled = [o for o in action.option_strings if o.startswith("--")]
                if spelled and spelled[0] != "--help":
                    found.setdefault(spelled[0], set()).update(spelled)
    return found


def test_the_commands_offer_at_most_55_long_options(monkeypatch: pytest.MonkeyPatch) -> None:
    options = long_options(monkeypatch)
    assert len(options) <= MOST_OPTIONS, sorted(options)
    spellings = set().union(*options.values())
    assert spellings & DROPPED_EVERYWHERE == set()


def test_every_module_with_a_parser_is_counted() -> None:
    """A new command's parser is in the count (its module is an entry point above)."""
    counted = {entry.partition(":")[0] for entry in _entry_points()}
    with_parser = set()
    for root in SHIPPED:
        for path in (ROOT / root).rglob("*.py"):
            text = path.read_text()
            if "ArgumentParser(" in text or re.search(r"\bParser\(prog=", text):
                rel = path.relative_to(ROOT / root).with_suffix("")
                with_parser.add(".".join((root.rpartition("/")[2], *rel.parts)))
    assert with_parser <= counted | {"ambrosia_cli.run"}, with_parser - counted
