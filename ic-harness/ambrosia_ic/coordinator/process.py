"""A coordinator as a process: open every port, print the ready line, accept the
binding, run the start-up flow, and stop cleanly; and the standalone coordinator, which
runs this with the flow its directory calls for (``startup``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ambrosia_core.durable import make_dirs

from .. import registry
from ..binding import BindingPorts, reserve_port
from . import commit, reading, startup
from .lifecycle import Coordinator

__all__ = ["MainFlow", "StandaloneCoordinator", "serve"]

# The flow a coordinator runs once its binding connected.
MainFlow = Callable[[], Coroutine[Any, Any, None]]


async def serve(c: Coordinator, ready_fields: str,
                choose: Callable[[], MainFlow]) -> tuple[int, str]:
    """Open every port, print the ready line, accept the binding and run the flow
    ``choose`` picks (after the ports are open) until the coordinator stops.
    Returns ``(exit code, last message)``."""
    c._done = asyncio.get_running_loop().create_future()
    c.link_server.burst_done = lambda: commit.after_burst(c)
    ports = BindingPorts(c.receive_port, c.send_port, c.log)
    try:
        # Every port first: a busy one must stop the start before anything is
        # written (or, for a replica, before it claims an epoch).
        c.link_options.tls.check_listen(c.ic_host, "the link server", c.log)
        c.link_server.sock = reserve_port(c.ic_port, "links", c.ic_host)
        await ports.open()
        main = choose()
        # Links elsewhere than 127.0.0.1 are said; the usual line stays as it was.
        link = ("" if c.advertise == c.ic_host == registry.LOOPBACK else
                f" link={registry.format_address(c.advertise, c.ic_port)}"
                + (f" listen={c.ic_host}" if c.ic_host != c.advertise else ""))
        link += " tls=on" if c.tls is not None else ""  # links over TLS
        print(f"ambrosia-ic ready: instance={c.name} {ready_fields}{link}",
              file=c.stdout, flush=True)
        c.send = await ports.accept_into(reading.BindingReader(c))
        c.spawn(main())
        return await c._done
    finally:
        await c.shutdown()
        ports.close()


class StandaloneCoordinator(Coordinator):
    """The only coordinator of its instance's directory (its lock says so)."""

    async def run(self) -> int:
        make_dirs(self.dir)
        self.lock.acquire()
        try:
            code, message = await serve(
                self, f"receive={self.reg.receive_port} send={self.reg.send_port} "
                      f"ic={self.reg.ic_port}", self._choose)
        finally:
            self.lock.release()
            if self.new_lock is not None:
                self.new_lock.release()
        if message:
            self.log(message)
        return code

    def _choose(self) -> MainFlow:
        plan = startup.choose_flow(self)
        return lambda: startup.start(self, plan)
