"""The coordinator's commands (``python -m ambrosia_ic``). Sub-commands mirror the real
``Ambrosia.exe``.

Adding a sub-command: write ``add_<name>(subparsers)`` in the ``commands`` module of its
group, registering a parser whose ``handler`` default is a function ``(args) -> int``, and
list it in ``COMMANDS``. Every command's module is imported at each start, so it imports
at the top only what its parser needs; what the command runs (the coordinator, the log's
readers, asyncio, the Raft client) is imported in its handler
(``tests/cli/test_startup_imports.py`` checks).

The ``ambrosia`` command (the ``ambrosia_cli`` package) is these commands plus the ones
that need the binding: ``run``, and ``log dump`` with method names; this package never
imports the binding's runtime or programming model.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ambrosia_core.errors import AmbrosiaError, ArgumentError

from . import registry
from .commands.debug_instance import EXIT_DIVERGED, add_debug
from .commands.ic import EXIT_SIGINT, add_ic
from .commands.link_secret import add_link_secret
from .commands.log import add_log, dump_log
from .commands.raft_cluster import add_raft_cluster
from .commands.registration import add_add_replica, add_register

__all__ = ["COMMANDS", "EXIT_DIVERGED", "EXIT_SIGINT", "EXIT_USAGE", "Parser", "add_log",
           "build_parser", "dump_log", "execute", "main"]

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool its reader left


class Parser(argparse.ArgumentParser):
    """Argument errors are one line and exit code 2, with no usage dump; a sub-command's
    ``--help`` begins with its one-line help unless it is given a description."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _Commands(argparse._SubParsersAction):
    """Sub-commands (``add_subparsers``) whose parsers describe themselves."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        said = kwargs.get("help")
        if kwargs.get("description") is None and said:
            kwargs["description"] = said[0].upper() + said[1:] + (
                "" if said.endswith((".", ")")) else ".")
        return super().add_parser(name, **kwargs)


COMMANDS: tuple[Callable[[Any], Any], ...] = (
    add_register, add_add_replica, add_ic, add_debug, add_log, add_raft_cluster,
    add_link_secret)


def build_parser(commands: Sequence[Callable[[Any], Any]] = COMMANDS
                 ) -> argparse.ArgumentParser:
    parser = Parser(prog="ambrosia", description="AMBROSIA immortal coordinator and tools")
    parser.add_argument("--home", default=None, help=registry.HOME_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in commands:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return execute(build_parser(), list(sys.argv[1:] if argv is None else argv))


def execute(parser: argparse.ArgumentParser, argv: list[str],
            extra: dict[str, Any] | None = None) -> int:
    """Parse ``argv``, run the command's handler and return its exit code; errors are one
    line on stderr.

    Args:
        extra: attributes set on the parsed arguments before the handler runs (arguments
            split off before parsing, such as ``run``'s).
    """
    try:
        args = parser.parse_args(argv)
        for key, value in (extra or {}).items():
            setattr(args, key, value)
        code = int(args.handler(args))
        sys.stdout.flush()  # here, not at exit, where a closed pipe could not be caught
        return code
    except ArgumentError as err:
        print(f"ambrosia {args.command}: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except AmbrosiaError as err:
        print(f"ambrosia: error: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ambrosia log dump ... | head`: the reader has gone, as for any Unix tool.
        if not _stdout_is_broken():
            raise
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _stdout_is_broken() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _discard_stdout() -> None:
    # What is still buffered can go nowhere; the interpreter's final flush would otherwise
    # report the broken pipe once more on the way out.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
