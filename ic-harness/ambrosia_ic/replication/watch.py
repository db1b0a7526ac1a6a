"""A standby's watch on the primary: an authenticated connection to the link address the
primary's epoch claim names, which the primary's process holds open and never writes to.
When that process dies (``kill -9``, a crash) its kernel closes the connection at once,
and the standby may claim the next epoch without waiting out the lease.

What the watch says, and what it does not:

- the connection closed after the primary proved, within the link handshake (the link
  secret, fresh nonces), that it holds the very epoch watched: that process ended, or
  gave the epoch up (it resigns, is fenced or stops; it closes its watchers then);
- a connection that stays open but silent (a paused primary), one that cannot be made,
  one to a process that does not hold the epoch, and a network that is cut (no close
  reaches the standby) say nothing: the lease decides, as without a watch.

Safety never rests on the watch: a claim counts by the log's order, and a primary that
was wrongly taken for dead (a close that a middlebox forged, say) is fenced by it like
a paused one. The watch only shortens the wait after a death.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ambrosia_core.tls import Tls, TlsHandshakeError
from ambrosia_ic.errors import LinkAuthenticationError

from ..coordinator.inbound import WATCH_SENDER
from ..links import open_link

__all__ = ["WATCH_SENDER", "PrimaryWatch"]

RETRY = 0.1  # seconds between attempts while the primary does not accept links yet
HANDSHAKE = 2.0  # a primary not yet serving links keeps the connection in its backlog


class PrimaryWatch:
    """Watches the holder of one epoch at a time; ``gone`` is set to the epoch whose
    holder's connection closed."""

    def __init__(self, name: str, secret: bytes, tls: Tls | None) -> None:
        self.name = name
        self.secret = secret
        self.tls = tls
        self.epoch = 0
        self.gone: int | None = None
        self._task: asyncio.Task[None] | None = None

    def follow(self, epoch: int, holder: dict[str, Any]) -> None:
        """Watch the holder of ``epoch`` (its claim's ``ic_host`` and ``ic_port``), unless
        it is watched already."""
        if epoch == self.epoch:
            return
        self.stop()
        self.epoch = epoch
        host, port = holder.get("ic_host"), holder.get("ic_port")
        if isinstance(host, str) and isinstance(port, int) and epoch > 0:
            self._task = asyncio.get_running_loop().create_task(self._watch(epoch, host, port))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.epoch = 0

    async def _watch(self, epoch: int, host: str, port: int) -> None:
        while True:
            try:
                reader, writer, held = await asyncio.wait_for(
                    open_link(host, port, self.secret, WATCH_SENDER, self.name, self.tls),
                    HANDSHAKE)
            except (OSError, TimeoutError, LinkAuthenticationError, TlsHandshakeError,
                    asyncio.IncompleteReadError):
                await asyncio.sleep(RETRY)  # not serving links yet, or not reachable
                continue
            if held != epoch:  # another process at that address: it proves nothing
                writer.close()
                await asyncio.sleep(RETRY)
                continue
            break
        try:
            with contextlib.suppress(OSError):
                while await reader.read(1 << 12):
                    pass  # nothing is ever sent; what comes is ignored
        finally:
            writer.close()
        self.gone = epoch
