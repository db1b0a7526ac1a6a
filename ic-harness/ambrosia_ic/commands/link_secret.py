"""``link-secret export FILE`` / ``import FILE`` / ``show``: moving the registry's link
secret to another machine (see ``registry.secret`` for why it is not in the cluster)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import registry

__all__ = ["add_link_secret"]


def _export(args: argparse.Namespace) -> int:
    secret = registry.export_secret(args.file, args.home, force=args.force)
    print(f"wrote the link secret to {args.file} (mode 0600; fingerprint "
          f"{registry.fingerprint(secret)}): move it over a private channel and run `ambrosia "
          "link-secret import FILE` there, then delete it")
    return 0


def _import(args: argparse.Namespace) -> int:
    secret, changed = registry.import_secret(args.file, args.home, force=args.force)
    home = registry.ambrosia_home(args.home)
    said = "took the link secret into" if changed else "the link secret was already in"
    print(f"{said} the registry at {home} (fingerprint {registry.fingerprint(secret)})")
    return 0


def _show(args: argparse.Namespace) -> int:
    secret = registry.link_secret(args.home)
    print(f"fingerprint {registry.fingerprint(secret)}")
    return 0


def add_link_secret(sub: Any) -> None:
    p = sub.add_parser("link-secret",
                       help="copy the secret coordinators authenticate links with between "
                            "machines (it is never put in a Raft cluster)")
    ops = p.add_subparsers(dest="secret_command", required=True,
                           metavar="{export,import,fingerprint}")
    e = ops.add_parser("export", help="write this registry's link secret to FILE (mode 0600)")
    e.add_argument("file", metavar="FILE", help="where to write it (move it privately)")
    e.add_argument("--force", action="store_true",
                   help="replace FILE even if it holds something else")
    e.set_defaults(handler=_export)
    i = ops.add_parser("import", help="make the link secret in FILE this registry's")
    i.add_argument("file", metavar="FILE", help="a file `link-secret export` wrote")
    i.add_argument("--force", action="store_true",
                   help="replace a different secret (coordinators still using the old one "
                        "are then refused)")
    i.set_defaults(handler=_import)
    f = ops.add_parser("fingerprint",
                       help="a digest of this registry's secret, to compare two machines' "
                            "without showing either")
    f.set_defaults(handler=_show)
