"""What the ambrosia command prints: help for every option, and quiet ends when the reader of
its output goes away (``ambrosia log dump ... | head``)."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import ambrosia_ic
from ambrosia_ic import cli, registry

from ambrosia_cli import main as ambrosia_main
from ambrosia_cli import run as run_cli
from ambrosia_py.runtime import cli as binding_cli
from tests.launcher import wait_until

from .conftest import Harness
from .test_first_start import _run_chain


def _parsers(parser: argparse.ArgumentParser, name: str
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for sub_name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases share one parser
                    seen.add(id(sub))
                    yield from _parsers(sub, f"{name} {sub_name}")


def _all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    return [*_parsers(ambrosia_main.build_parser(), "ambrosia"),
            ("ambrosia run", run_cli.build_parser())]


def test_every_option_of_every_sub_command_has_help() -> None:
    names = [name for name, _ in _all_parsers()]
    assert names == ["ambrosia", "ambrosia register-instance", "ambrosia add-replica",
                     "ambrosia ic", "ambrosia debug-instance", "ambrosia log",
                     "ambrosia log dump", "ambrosia raft-cluster", "ambrosia link-secret",
                     "ambrosia link-secret export", "ambrosia link-secret import",
                     "ambrosia link-secret fingerprint", "ambrosia run",
                     "ambrosia status", "ambrosia list", "ambrosia stop", "ambrosia tls",
                     "ambrosia tls init", "ambrosia run"]
    missing = []
    binding = ("python -m ambrosia_py.runtime", binding_cli.build_parser())
    for name, parser in [*_all_parsers(), binding]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {a.dest}" for a in action._choices_actions
                            if not (a.help or "").strip()]
            elif not (action.help or "").strip():
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


def test_help_lists_the_create_service_values_and_one_home_default() -> None:
    parsers = dict(_all_parsers())
    cs = _option(parsers["ambrosia register-instance"], "-cs")
    assert cs.metavar == "{auto,no-recovery,always-recover}"
    assert all(mode in (cs.help or "") for mode in registry.CREATE_SERVICE_MODES)
    top = _option(parsers["ambrosia"], "--home").help
    assert top == _option(run_cli.build_parser(), "--home").help == (
        "registry directory (default: $AMBROSIA_HOME, else ~/.ambrosia)")


# Each parser's help as ``--help`` prints it (argparse prints ``format_help()``), formatted
# here rather than by nineteen processes that each import the package again;
# test_output_to_a_reader_that_went_away_ends_quietly runs ``--help`` as a process.
def test_help_names_no_internal_class() -> None:
    internal = set()
    for module_name in ("binding", "coordinator", "debug", "dump", "launch", "lease", "links",
                        "logstore", "recovery", "registry", "replication.shared_dir",
                        "replication.raft"):
        module = __import__(f"ambrosia_ic.{module_name}", fromlist=["_"])
        internal |= {n for n, obj in vars(module).items()
                     if inspect.isclass(obj) and obj.__module__.startswith(ambrosia_ic.__name__)}
    assert {"Coordinator", "SharedDirReplica", "RaftReplica", "Registration"} <= internal
    for name, parser in _all_parsers():
        text = parser.format_help()
        named = sorted(c for c in internal if re.search(rf"\b{c}\b", text))
        assert (name, named) == (name, [])


def _closed_pipe_run(harness: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command with stdout a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "ambrosia_cli", *args], env=harness.env,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


def test_output_to_a_reader_that_went_away_ends_quietly(harness: Harness) -> None:
    harness.register("alpha")
    harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 30)
    full = harness.cli("log", "dump", "-i", "alpha", "--json")
    assert full.returncode == 0 and len(full.stdout) > 2 * 8192  # past the output buffer
    broken = cli.EXIT_BROKEN_PIPE
    # (argparse's help ignores a failed write and exits 0 by itself.)
    for args, code in ((["log", "dump", "-i", "alpha", "--json"], broken),
                       (["log", "dump", "-i", "alpha"], broken),
                       (["--help"], 0), (["register-instance", "--help"], 0),
                       (["run", "--help"], 0)):
        r = _closed_pipe_run(harness, *args)
        assert (args, r.returncode, r.stderr) == (args, code, "")
