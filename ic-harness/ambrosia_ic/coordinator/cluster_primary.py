"""Where a Raft-backed instance's primary listens, as its newest epoch claim in the
cluster says: a sender on another machine has no instance directory to read an epoch
file from, so its outbound link follows the callee's log in the cluster instead.

The claim's holder info carries the primary's link address (``ic_host``, ``ic_port``);
a claim of a newer epoch moves the link, as a newer epoch file does on one machine.
Reading the claims means streaming the cluster's log (the protocol has no index by
instance), so one follower per destination, shared by nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ambrosia_py.errors import LogCorruptionError

from ..binding import LOOPBACK
from ..logstore.raft_store import RaftLogStore
from ..raft.errors import RaftError

__all__ = ["ClusterPrimary", "claimed_address"]

POLL = 0.05  # the longest to wait for the leader's broadcast before reading again
RETRY = 0.5  # after the cluster failed a read


def claimed_address(holder: dict[str, Any]) -> tuple[str, int] | None:
    """The link address an epoch claim's holder info names (None: it names none)."""
    host = holder.get("ic_host", LOOPBACK)
    port = holder.get("ic_port")
    if isinstance(host, str) and host and isinstance(port, int) and 0 < port < 65536:
        return host, port
    return None


class ClusterPrimary:
    """Follows the epoch claims of the log ``key`` in the cluster at ``address``.

    ``where`` is the newest claim's address (None until one was read). ``follow`` runs
    until cancelled; a cluster that fails a read is tried again after ``RETRY`` seconds
    (the link keeps the last address it knew meanwhile).
    """

    def __init__(self, address: str, key: str, log: Callable[[str], None]) -> None:
        self.address = address
        self.key = key
        self.log = log
        self.where: tuple[str, int] | None = None
        self.epoch = 0

    async def follow(self) -> None:
        store = RaftLogStore(self.address, self.key)
        try:
            while True:
                try:
                    await store.catch_up()
                except (RaftError, LogCorruptionError) as err:
                    self.log(f"finding the primary of {self.key}: {err}")
                    await asyncio.sleep(RETRY)
                    continue
                store.drain_events()  # only the claims matter here, and the view has them
                view = store.view
                if view.epoch != self.epoch:
                    self.epoch = view.epoch
                    self.where = claimed_address(view.holder)
                await store.wait(POLL)
        finally:
            store.close()
