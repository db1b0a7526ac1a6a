"""Every console script (``[project.scripts]`` in pyproject.toml) describes itself in its
``--help``, and so does each of its sub-commands; every option and argument has a help
text, and an option with a default worth saying says it."""

from __future__ import annotations

import argparse
import importlib
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
