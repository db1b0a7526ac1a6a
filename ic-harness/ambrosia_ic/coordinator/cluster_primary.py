"""Where a Raft-backed instance's primary listens, as its newest epoch claim in the
cluster says: a sender on another machine has no instance directory to read an epoch
file from, so its outbound link follows the callee's log in the cluster instead.

The claim's holder info carries the primary's link address (``ic_host``, ``ic_port``);
a claim of a newer epoch moves the link, as a newer epoch file does on one machine.
Reading the claims means streaming the cluster's log (the protocol has no index by
instance), so one follower per destination, shared by nothing else.

A long-lived cluster holds much more than one callee's claims, so a follower starts at
a claim known to be valid (``ClaimMark``: one the claimant announced in its epoch file,
or one this machine's callers saw before) rather than at the start: the claims before
it are settled, and from it on the follower folds the entries as every reader does. A
mark that does not name a claim of this log (another cluster, a log started afresh) is
found out at the first read, and the follower reads from the start instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ambrosia_ic.errors import LogCorruptionError, LogStoreError

from .. import registry
from ..binding import LOOPBACK
from ..lease import current_primary
from ..logstore.raft_entries import EpochClaimed
from ..registry.raft_address import without_secret

if TYPE_CHECKING:
    from ..logstore.raft_store import RaftLogStore

__all__ = ["ClaimMark", "ClusterPrimary", "claimed_address", "known_claim"]

POLL = 0.05  # the longest to wait for the leader's broadcast before reading again
RETRY = 0.5  # after the cluster failed a read


def claimed_address(holder: dict[str, Any]) -> tuple[str, int] | None:
    """The link address an epoch claim's holder info names (None: it names none)."""
    host = holder.get("ic_host", LOOPBACK)
    port = holder.get("ic_port")
    if isinstance(host, str) and host and isinstance(port, int) and 0 < port < 65536:
        return host, port
    return None


@attrs.frozen
class ClaimMark:
    """The claim of ``epoch`` at log index ``index``, found valid by a reader of the log
    up to it (the claimant, or a follower that read there)."""

    index: int
    epoch: int

    @classmethod
    def parse(cls, index: Any, epoch: Any) -> ClaimMark | None:
        """A mark from untrusted JSON values (None: not a mark)."""
        if type(index) is int and type(epoch) is int and index > 0 and epoch > 0:
            return cls(index, epoch)
        return None


def known_claim(home: Path, reg: registry.Registration, key: str) -> ClaimMark | None:
    """The newest claim of ``reg``'s log ``key`` known on this machine without reading
    the cluster: the one a replica that claimed here announced in its epoch file, or
    the one a caller here remembered (None: read from the log's start)."""
    marks = []
    info = current_primary(registry.instance_dir(reg))
    if info.get("log_key") == key:
        marks.append(ClaimMark.parse(info.get("claim_index"), info.get("epoch")))
    seen = registry.remembered_claim(home, without_secret(reg.log_store), key)
    if seen is not None:
        marks.append(ClaimMark.parse(*seen))
    return max((m for m in marks if m is not None), key=lambda m: m.epoch, default=None)


class ClusterPrimary:
    """Follows the epoch claims of the log ``key`` in the cluster at ``address``.

    ``where`` is the newest claim's address (None until one was read). ``follow`` runs
    until cancelled; a cluster that fails a read is tried again after ``RETRY`` seconds
    (the link keeps the last address it knew meanwhile). ``start`` is a claim to read
    from instead of the log's start; ``remember`` is told each newer claim read.
    ``entries_read`` counts the cluster's entries read so far, every instance's.
    """

    def __init__(self, address: str, key: str, log: Callable[[str], None], *,
                 start: ClaimMark | None = None,
                 remember: Callable[[ClaimMark], None] | None = None) -> None:
        self.address = address
        self.key = key
        self.log = log
        self.start = start
        self.remember = remember
        self.where: tuple[str, int] | None = None
        self.epoch = 0
        self._read_before = 0  # by a store given up on (a mark that was not a claim)
        self._store: RaftLogStore | None = None

    @property
    def entries_read(self) -> int:
        return self._read_before + (self._store.view.entries_read if self._store else 0)

    def _open(self) -> RaftLogStore:
        # pyzmq and the Raft client: only a coordinator with a raft:// callee needs them.
        from ..logstore.raft_store import RaftLogStore

        store = RaftLogStore(self.address, self.key)
        if self.start is not None:
            store.view.start_at_claim(self.start.index, self.start.epoch)
        self._store = store
        return store

    def _mark_holds(self, claims: list[EpochClaimed]) -> bool:
        """After the first read: False if the mark did not name a claim of this log (the
        first claim the view took is not the mark's)."""
        mark = self.start
        if mark is None or (claims and (claims[0].index, claims[0].epoch) == (
                mark.index, mark.epoch)):
            return True
        self.log(f"finding the primary of {self.key}: log index {mark.index} holds no "
                 f"claim of epoch {mark.epoch}; reading the cluster's log from the start")
        self._read_before += self._store.view.entries_read if self._store else 0
        self.start = None
        return False

    async def follow(self) -> None:
        store = self._open()
        try:
            while True:
                try:
                    await store.catch_up()
                except (LogStoreError, LogCorruptionError) as err:
                    self.log(f"finding the primary of {self.key}: {err}")
                    await asyncio.sleep(RETRY)
                    continue
                claims = [e for e in store.drain_events() if isinstance(e, EpochClaimed)]
                if not self._mark_holds(claims):
                    store.close()
                    store = self._open()
                    continue
                self.start = None  # settled: a failed read later does not undo it
                view = store.view
                if view.epoch != self.epoch:
                    self.epoch = view.epoch
                    self.where = claimed_address(view.holder)
                    if self.remember is not None:
                        self.remember(ClaimMark(view.claim_index, view.epoch))
                await store.wait(POLL)
        finally:
            store.close()
