"""`make demo-requests`: a client sends numbered requests to a server; the server is killed with
kill -9 part-way and restarted; every request is applied exactly once, in order."""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ambrosia_py.testing import repro, start_immortal  # noqa: E402
from samples.demo.services import SERVER, Server  # noqa: E402


def say(text: str) -> None:
    print(f"demo: {text}", flush=True)


def main(requests: int = 500) -> int:
    with tempfile.TemporaryDirectory(prefix="ambrosia-demo-") as home:
        env = dict(os.environ, DEMO_REQUESTS=str(requests))
        kw = {"home": home, "cwd": ROOT, "env": env}
        say(f"starting the server immortal {SERVER!r} (and its coordinator)")
        server = start_immortal("samples.demo.services:Server", SERVER, **kw)  # type: ignore[arg-type]
        client = None
        try:
            say(f"starting the client; it sends requests 1..{requests}, awaiting each reply")
            client = start_immortal("samples.demo.services:Client", "demo-client", **kw)  # type: ignore[arg-type]
            kill_at = random.Random().choice(range(100, requests - 99, 50))
            server.wait_for(f"server applied request {kill_at}")
            say(f"the server has applied request {kill_at}: kill -9 the server")
            server.kill()
            say("restarting the server: it recovers from its checkpoint and log")
            server = start_immortal("samples.demo.services:Server", SERVER, **kw)  # type: ignore[arg-type]
            recovered = server.wait_for("recovery complete")
            say("server " + recovered.split(": ", 1)[-1])
            done = client.wait_for("client done", timeout=120)
            say("client " + done.split("client ", 1)[-1])
        finally:
            if client is not None:
                client.stop()
            server.stop()
        say("replaying the server's log (from its oldest kept checkpoint) with debug-instance")
        result = repro(SERVER, Server, home=home)
        state = result.state
        say(f"replayed {result.records_replayed} records; the outputs match the recorded "
            f"run ({result.status})")
        ok = state.applied == list(range(1, requests + 1))
        dups = len(state.applied) - len(set(state.applied))
        if ok:
            say(f"{requests} requests, {len(state.applied)} applied exactly once, in order")
            return 0
        say(f"FAILED: {requests} requests, {len(state.applied)} applied, {dups} duplicates")
        return 1


if __name__ == "__main__":
    try:
        count = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    except ValueError:
        count = 0
    if count < 200:
        # The kill lands on a multiple of 50 between request 100 and 100 before the end.
        print("demo: error: REQUESTS must be a whole number of at least 200", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(count))
