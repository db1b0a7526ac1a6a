"""The 2PC file sink command: a ``SinkServer`` over a ``FileSinkStore`` directory.

It speaks as Wallaroo's own 2PC file sink did (see ``sinkserver``), with two differences:
an abort never cuts below the committed offset, and a commit may leave written bytes after
the range pending. The durable side is ``sinkstore.FileSinkStore``.

    ambrosia-sink --listen 127.0.0.1:7200 --dir DIR [--cookie C]

(or ``python -m ambrosia_services.connectors.clients.filesink``)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from .errors import ClientError
from .sinkcommand import add_server_options, serve
from .sinkserver import SinkServer
from .sinkstore import FileSinkStore

__all__ = ["FileSink", "main"]

#: The file sink is the protocol half over a directory; the name stays for its users.
FileSink = SinkServer


async def _run(args: argparse.Namespace) -> None:
    async def open_store() -> FileSinkStore:
        return FileSinkStore(Path(args.dir))  # creates the directory: after every check

    await serve(open_store, args, lambda store: f"directory {args.dir}, committed "
                f"{store.committed_offset} bytes")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="ambrosia-sink", description="A 2PC file sink for the Wallaroo connector protocol."
    )
    add_server_options(p, 7200)
    p.add_argument("--dir", required=True, help="the output directory (created if missing)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ambrosia-sink: %(message)s")
    try:
        asyncio.run(_run(args))
    except (ClientError, OSError) as e:
        print(f"ambrosia-sink: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
