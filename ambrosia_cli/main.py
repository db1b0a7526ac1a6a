"""The ``ambrosia`` command's parser and entry point: the coordinator's commands, ``run``,
``log dump`` able to name methods, and ``status``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ambrosia_ic import cli as ic_cli
from ambrosia_ic import registry

from ambrosia_core.errors import AmbrosiaError

from .instances import add_list, add_stop
from .status import add_status
from .tls import add_tls

__all__ = ["COMMANDS", "build_parser", "main"]


# ------------------------------------------------------------------ log dump, with names


def _add_log(sub: Any) -> None:
    d = ic_cli.add_log(sub)
    d.add_argument("--class", dest="immortal_class", metavar="MODULE:CLASS", default=None,
                   help="show method names, senders and decoded arguments as this Immortal "
                        "class sees them (default: the class `ambrosia run` recorded for "
                        "this version, if any; without one, method ids)")
    d.set_defaults(handler=_dump)


def _dump(args: argparse.Namespace) -> int:
    from . import calls  # the binding's serialization: only a dump with names needs it

    reg = registry.load(args.instance_name, args.home)
    version = (reg.current_version if args.current_version is None
               else args.current_version)
    target, cls = _dump_class(args, version)
    if cls is None:
        return ic_cli.dump_log(args)
    return ic_cli.dump_log(args, describe=lambda rpc: calls.describe_call(cls, rpc),
                           format_rpc=calls.format_call,
                           class_line=f"methods, senders and arguments as {target} sees them")


def _dump_class(args: argparse.Namespace, version: int) -> tuple[str | None, Any]:
    """The class whose methods ``log dump`` names: ``--class``, else the one ``ambrosia
    run`` recorded for this version (a recorded class that no longer imports is said
    in one line and the dump goes on with method ids), else none."""
    from . import calls

    if args.immortal_class:
        return args.immortal_class, calls.load_class(args.immortal_class)
    try:
        recorded = registry.recorded_class(args.instance_name, version, args.home)
        if recorded is None:
            return None, None
        return recorded[0], calls.load_class(*recorded)
    except AmbrosiaError as err:
        print(f"ambrosia log dump: note: showing method ids: the recorded class cannot be "
              f"used: {err}", file=sys.stderr, flush=True)
        return None, None


# ------------------------------------------------------------------ run


def _run(args: argparse.Namespace) -> int:
    from .run import run_main  # the binding's runtime: only `run` loads it

    # The top-level --home reaches `run` as its default; `run --home` still wins.
    return run_main(list(args.run_args), default_home=args.home)


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run an immortal: `ambrosia run --help` lists its options",
                       add_help=False)
    p.add_argument("run_args", nargs=argparse.REMAINDER, metavar="...",
                   help="MODULE:CLASS -i NAME and the options `ambrosia run --help` lists")
    p.set_defaults(handler=_run)


# The coordinator's commands in their order, its `log` replaced by the one naming methods.
COMMANDS: tuple[Callable[[Any], Any], ...] = (
    *(_add_log if add is ic_cli.add_log else add for add in ic_cli.COMMANDS), _add_run,
    add_status, add_list, add_stop, add_tls)


def build_parser() -> argparse.ArgumentParser:
    return ic_cli.build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ambrosia`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # argparse's REMAINDER cannot start with an option (``ambrosia run --help``), so the
    # run command's arguments are split off before parsing.
    extra: dict[str, Any] = {}
    if "run" in argv:
        i = argv.index("run")
        if all(a.startswith("--home") or argv[j - 1] == "--home" for j, a in enumerate(argv[:i])):
            argv, extra["run_args"] = argv[: i + 1], argv[i + 1 :]
    return ic_cli.execute(build_parser(), argv, extra)
