"""The directory of instances, a port of the coordinator: whether a sender may link here,
and where a destination's coordinator listens. ``commands/ic.py`` gives each coordinator
its directory (``Coordinator(directory=...)``).

``RegistryDirectory`` reads this machine's registry and, for instances it lacks, the
registrations published in a Raft cluster (``ic --registry``, else the instance's own
``raft://`` log store), taking them into the registry so that calls can be answered: a
callee's machines need no copy of every caller's registration, nor a caller's of every
callee's. A destination with a log store of its own is found by its epoch claims there
(``cluster_primary``), an active/active one by its newest epoch file, any other by its
registration.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

import attrs

from ambrosia_ic.errors import LogStoreError, RegistryError

from .. import registry
from ..lease import current_primary
from ..logstore.registrations import fetch_registration
from ..registry.raft_address import without_secret
from .cluster_primary import ClaimMark, ClusterPrimary, claimed_address, known_claim
from .senders import KnownSenders

__all__ = ["ADOPT_RETRY", "REFRESH_EVERY", "Destination", "Directory", "DirectoryFactory",
           "RegistryDirectory"]

ADOPT_RETRY = 1.0  # seconds between looks for a registration not yet in the cluster
# Seconds between looks in the cluster for a newer registration of a destination taken
# from there, while its link cannot connect.
REFRESH_EVERY = 2.0

Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


@attrs.frozen
class Destination:
    """How a link finds one destination."""

    address: Callable[[], tuple[str, int]]  # asked before each connection attempt
    unreachable: Callable[[], None]  # told of each failed attempt


class Directory(Protocol):
    def known_sender(self, name: str) -> Awaitable[bool]:
        """Whether ``name`` may link to this instance."""

    def destination(self, dest: str) -> Destination:
        """Where calls to ``dest`` go (asked once per destination, as its link is made)."""


# What ``commands/ic.py`` injects: makes a coordinator's directory from how it logs a line
# and runs a task it cancels when it stops.
DirectoryFactory = Callable[[Callable[[str], None], Spawn], Directory]


class RegistryDirectory:
    """This registry, and a cluster's published registrations for what it lacks.

    Args:
        home: the registry.
        cluster: the Raft cluster registrations this registry lacks are read from ("":
            none).
        log: one line per adoption, per failed read of the cluster, per waiting call.
        spawn: runs a lookup as a task the coordinator cancels when it stops.
    """

    def __init__(self, home: Path, cluster: str, log: Callable[[str], None],
                 spawn: Spawn) -> None:
        self.home = home
        self.cluster = cluster
        self._log = log
        self._spawn = spawn
        self.senders = KnownSenders(home, lambda: self.cluster, log, spawn)

    def known_sender(self, name: str) -> Awaitable[bool]:
        return self.senders.known_sender(name)

    def destination(self, dest: str) -> Destination:
        try:
            registry.load(dest, self.home)
        except RegistryError as err:
            if self.cluster and not registry.registration_exists(dest, self.home):
                self._log(f"calls to {dest!r} wait for its registration from the cluster "
                          f"at {without_secret(self.cluster)}")
                self._spawn(self._adopt(self.cluster, dest))
            else:
                self._log(f"calls to {dest!r} will wait: {err}")
        return Destination(self._address(dest), self._refresher(dest))

    def _address(self, dest: str) -> Callable[[], tuple[str, int]]:
        home = self.home
        # The follower of dest's claims and its task, once dest has a log store.
        found: list[tuple[ClusterPrimary, asyncio.Task[Any]]] = []

        def in_cluster(reg: registry.Registration) -> tuple[str, int] | None:
            key = reg.log_key
            if found and (found[0][0].address, found[0][0].key) != (reg.log_store, key):
                found.pop()[1].cancel()  # registered afresh: a log of its own
            if not found:
                cluster = without_secret(reg.log_store)

                def remember(mark: ClaimMark) -> None:
                    self._spawn(asyncio.to_thread(registry.remember_claim, home, cluster,
                                                  key, mark.index, mark.epoch))

                finder = ClusterPrimary(reg.log_store, key, self._log,
                                        start=known_claim(home, reg, key), remember=remember)
                found.append((finder, self._spawn(finder.follow())))
            return found[0][0].where

        def address() -> tuple[str, int]:
            reg = registry.load(dest, home)
            if reg.log_store:
                # The newest claim in the cluster names the primary (no directory to
                # share); until it is read, replica 0's address is as good a guess as any.
                return in_cluster(reg) or (reg.advertise_host, reg.ic_port)
            if reg.active_active:
                # The newest epoch file names the replica holding the log.
                where = claimed_address(current_primary(registry.instance_dir(reg)))
                if where is not None:
                    return where
            return reg.advertise_host, reg.ic_port

        return address

    async def _adopt(self, cluster: str, dest: str) -> None:
        """Take ``dest``'s registration from the cluster into this registry once it is
        published there (the link, meanwhile, retries: it finds the registration then)."""
        shown = without_secret(cluster)
        while True:
            try:
                doc = await fetch_registration(cluster, dest)
            except LogStoreError as err:
                self._log(f"reading the registration of {dest!r} from {shown}: {err}")
                doc = None
            if doc is not None:
                try:
                    await asyncio.to_thread(registry.adopt, doc, self.home,
                                            f"the registration of {dest} in {shown}")
                except RegistryError as err:
                    self._log(f"calls to {dest!r} will wait: {err}")
                else:
                    self._log(f"took the registration of {dest!r} from {shown}")
                return
            await asyncio.sleep(ADOPT_RETRY)

    def _refresher(self, dest: str) -> Callable[[], None]:
        """What a link to ``dest`` calls when it cannot connect: a destination whose
        registration was taken from the cluster may have been registered again since
        (new ports or hosts, published there again), and this registry would keep the
        old one for good. Looks at most every ``REFRESH_EVERY`` seconds; a registration
        made here is never replaced."""
        next_look = 0.0

        def unreachable() -> None:
            nonlocal next_look
            now = time.monotonic()
            if now < next_look or not self.cluster:
                return
            next_look = now + REFRESH_EVERY
            self._spawn(self._refresh(self.cluster, dest))

        return unreachable

    async def _refresh(self, cluster: str, dest: str) -> None:
        """Take ``dest``'s registration from the cluster again if it was taken from
        there and the cluster now holds another."""
        if not await asyncio.to_thread(registry.adopted, dest, self.home):
            return
        shown = without_secret(cluster)
        try:
            doc = await fetch_registration(cluster, dest)
        except LogStoreError as err:
            self._log(f"reading the registration of {dest!r} from {shown}: {err}")
            return
        if doc is None:
            return

        def take() -> bool:
            try:
                if registry.published(registry.load(dest, self.home), self.home) == doc:
                    return False
            except RegistryError:
                pass  # damaged here: the cluster's is better
            if not registry.adopted(dest, self.home):  # registered here meanwhile
                return False
            registry.adopt(doc, self.home, f"the registration of {dest} in {shown}")
            return True

        try:
            if await asyncio.to_thread(take):
                self._log(f"took a newer registration of {dest!r} from {shown} (its link "
                          "could not connect to the one taken before)")
        except RegistryError as err:
            self._log(f"the registration of {dest!r} in {shown} was not taken: {err}")
