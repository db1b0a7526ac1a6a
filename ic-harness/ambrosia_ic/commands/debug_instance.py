"""``debug-instance``: replay a kept checkpoint and its logs to a binding (repro, upgrade test)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import registry

__all__ = ["EXIT_DIVERGED", "add_debug"]

EXIT_DIVERGED = 3


def _bool(value: str) -> bool:
    v = value.lower()
    if v in ("true", "1", "yes", "y"):
        return True
    if v in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


def _debug(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import sys

    from ambrosia_core.errors import AmbrosiaError

    from ..debug import run_debug_instance

    reg = registry.load(args.instance_name, args.home)
    version = reg.current_version if args.current_version is None else args.current_version
    try:
        result = asyncio.run(run_debug_instance(
            reg, checkpoint=args.checkpoint, current_version=version,
            testing_upgrade=args.testing_upgrade, receive_port=args.receive_port,
            send_port=args.send_port, idle_timeout=args.idle_timeout, stdout=sys.stdout,
        ))
    except AmbrosiaError as err:
        if args.json:
            print(json.dumps({"status": "error", "error": str(err)}), flush=True)
        raise
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True), flush=True)
    else:
        head = (f"debug-instance {result.instance} checkpoint {result.checkpoint}: replayed "
                f"{result.records_replayed} records, {result.outputs} outputs")
        if result.status == "ok":
            print(f"{head}; the outputs match the recorded run", flush=True)
        elif result.status == "unchecked":
            print(f"{head}; {result.detail}", flush=True)
        else:
            print(f"{head}; {result.detail}", flush=True)
    return EXIT_DIVERGED if result.status == "diverged" else 0


def add_debug(sub: Any) -> None:
    p = sub.add_parser("debug-instance", aliases=["DebugInstance"],
                       help="replay a checkpoint and its logs to a binding (repro / upgrade test)")
    p.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the registered instance whose files to replay")
    p.add_argument("-c", "--checkpoint", type=int, required=True,
                   help="replay checkpoint N and the logs N, N+1, ... (see `log dump`)")
    p.add_argument("-cv", "--current-version", "--currentVersion", type=int, default=None,
                   help="which version's directory (default: the registered current version)")
    p.add_argument("-tu", "--testing-upgrade", "--testingUpgrade", nargs="?", const=True,
                   default=False, type=_bool, metavar="true|false",
                   help="test an upgrade: the binding upgrades right after loading the checkpoint")
    p.add_argument("-rp", "--receive-port", "--receivePort", type=int, default=None,
                   help="the port the binding writes to (default: the registered one)")
    p.add_argument("-sp", "--send-port", "--sendPort", type=int, default=None,
                   help="the port the binding reads from (default: the registered one)")
    p.add_argument("--idle-timeout", type=float, default=None,
                   help="end this many seconds after the replay was sent and the binding "
                        "went quiet (default: wait until the binding closes)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    p.set_defaults(handler=_debug)
