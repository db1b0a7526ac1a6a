"""The file sink with a crash hook: it kills itself (SIGKILL, as a power cut would stop
it) the Nth time its store reaches a named durable step. Run as
``python -m tests.services.connectors.clients.crashing_sink`` with the sink's options and
``--crash-at STEP --crash-after N``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from ambrosia_services.connectors.clients import Address, FileSinkStore, SinkServer


def main() -> None:
    argv = sys.argv[1:]
    opts = dict(zip(argv[::2], argv[1::2], strict=True))
    step, remaining = opts["--crash-at"], [int(opts["--crash-after"])]

    def on_step(name: str) -> None:
        if name == step:
            remaining[0] -= 1
            if remaining[0] == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    async def run() -> None:
        store = FileSinkStore(Path(opts["--dir"]), on_step=on_step)
        sink = SinkServer(store, cookie=opts["--cookie"].encode())
        server = await sink.start(Address.parse(opts["--listen"], allow_port_zero=True))
        host, port = server.sockets[0].getsockname()[:2]
        logging.getLogger("crashing_sink").info("listening on %s:%d", host, port)
        async with server:
            await server.serve_forever()

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    asyncio.run(run())


if __name__ == "__main__":
    main()
