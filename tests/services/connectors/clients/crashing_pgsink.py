"""The PostgreSQL sink with a crash hook: the Nth time its store reaches a named durable
step, it kills with SIGKILL either itself or the whole database server (a process group),
and goes on (the database gone, its next statement fails). Run as
``python -m tests.services.connectors.clients.crashing_pgsink --crash-at STEP
--crash-after N [--kill-group PGID] -- <ambrosia-pgsink options>``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from ambrosia_services.connectors.clients import pgsink


def main() -> None:
    pgsink.BACKOFF_CAP = 0.3  # a database the test restarts is found again at once
    split = sys.argv.index("--")
    ours, theirs = sys.argv[1:split], sys.argv[split + 1:]
    hook = argparse.ArgumentParser()
    hook.add_argument("--crash-at", required=True)
    hook.add_argument("--crash-after", type=int, default=1)
    hook.add_argument("--kill-group", type=int, default=0, help="0: the sink itself")
    opts = hook.parse_args(ours)
    remaining = [opts.crash_after]

    def on_step(name: str) -> None:
        if name == opts.crash_at:
            remaining[0] -= 1
            if remaining[0] == 0:
                if opts.kill_group:
                    logging.getLogger("crashing_pgsink").info("kill -9 of the database")
                    with contextlib.suppress(ProcessLookupError):  # killed already
                        os.killpg(opts.kill_group, signal.SIGKILL)
                else:
                    os.kill(os.getpid(), signal.SIGKILL)

    args = pgsink.build_parser().parse_args(theirs)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    asyncio.run(pgsink.run(args, on_step))


if __name__ == "__main__":
    main()
