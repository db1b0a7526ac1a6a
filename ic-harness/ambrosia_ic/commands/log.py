"""``log dump``: every record and checkpoint of an instance's directory, with its problems."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .. import registry

if TYPE_CHECKING:
    from ..dump import Describe, FormatRpc

__all__ = ["add_log", "dump_log"]


def _dump(args: argparse.Namespace) -> int:
    return dump_log(args)


def dump_log(args: argparse.Namespace, describe: Describe | None = None,
             format_rpc: FormatRpc | None = None, class_line: str | None = None) -> int:
    """``log dump``: print every entry of the instance's directory; 1 if any is a problem.

    Args:
        describe: what an RPC means to the class that ran the instance (``ambrosia_cli``
            passes it; without it the dump shows method ids).
        format_rpc: how an RPC entry is printed (default: its method id and bytes).
        class_line: said under the header, naming the class (text output only).
    """
    from ..dump import dump_entries, format_entry, format_rpc_ids  # the log's readers

    reg = registry.load(args.instance_name, args.home)
    version = reg.current_version if args.current_version is None else args.current_version
    d = registry.instance_dir(reg, version)
    problems = 0
    if not args.json:
        print(f"instance {reg.instance_name}: {d}")
        for line in registry.link_lines(reg, args.home):
            print(line)
        if class_line is not None:
            print(class_line)
    for entry in dump_entries(d, reg.committer_id, describe):
        problems += entry["kind"] == "problem"
        print(format_entry(entry, args.json, format_rpc or format_rpc_ids))
    return 1 if problems else 0


def add_log(sub: Any) -> argparse.ArgumentParser:
    """The ``log`` command; returns its ``dump`` parser (``ambrosia_cli`` adds ``--class``)."""
    p = sub.add_parser("log", help="inspect an instance's log")
    logsub = p.add_subparsers(dest="log_command", required=True, metavar="{dump}")
    d = logsub.add_parser("dump", help="every record and checkpoint, with integrity problems")
    d.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the registered instance")
    # debug-instance's spelling for the same choice (-v stays its short form here).
    d.add_argument("-cv", "-v", "--current-version", "--currentVersion", type=int, default=None,
                   help="which version's directory (default: the registered current version)")
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    d.set_defaults(handler=_dump)
    return d
