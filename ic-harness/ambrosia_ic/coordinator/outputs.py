"""Outbound links: the core (``core.CoordinatorCore``) routes the binding's outputs into
one outbox per destination; here each outbox gets its link, which finds where the
destination runs (its registration, the epoch files of an active/active one, the claims
in its Raft log store) and takes registrations from a cluster when this registry lacks
them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ambrosia_py.errors import RegistryError

from .. import registry
from ..lease import current_primary
from ..links import OutboundLink
from ..registry.raft_address import without_secret
from .cluster_primary import ClaimMark, ClusterPrimary, claimed_address, known_claim

if TYPE_CHECKING:

    from .lifecycle import Coordinator

ADOPT_RETRY = 1.0  # seconds between looks for a registration not yet in the cluster
# Seconds between looks in the cluster for a newer registration of a destination taken
# from there, while its link cannot connect.
REFRESH_EVERY = 2.0

__all__ = ["open_link"]

# ------------------------------------------------------------------ outbound links
def _address(c: Coordinator, dest: str) -> Callable[[], tuple[str, int]]:
    home = c.home
    # The follower of dest's claims and its task, once dest has a log store.
    found: list[tuple[ClusterPrimary, asyncio.Task[Any]]] = []

    def in_cluster(reg: registry.Registration) -> tuple[str, int] | None:
        key = reg.log_key
        if found and (found[0][0].address, found[0][0].key) != (reg.log_store, key):
            found.pop()[1].cancel()  # registered afresh: a log of its own
        if not found:
            cluster = without_secret(reg.log_store)

            def remember(mark: ClaimMark) -> None:
                c.spawn(asyncio.to_thread(registry.remember_claim, home, cluster, key,
                                          mark.index, mark.epoch))

            finder = ClusterPrimary(reg.log_store, key, c.log,
                                    start=known_claim(home, reg, key), remember=remember)
            found.append((finder, c.spawn(finder.follow())))
        return found[0][0].where

    def address() -> tuple[str, int]:
        reg = registry.load(dest, home)
        if reg.log_store:
            # The newest claim in the cluster names the primary (no directory to share);
            # until it is read, replica 0's address is as good a guess as any.
            return in_cluster(reg) or (reg.advertise_host, reg.ic_port)
        if reg.active_active:
            # The newest epoch file names the replica holding the log.
            where = claimed_address(current_primary(registry.instance_dir(reg)))
            if where is not None:
                return where
        return reg.advertise_host, reg.ic_port

    return address


async def _adopt(c: Coordinator, cluster: str, dest: str) -> None:
    """Take ``dest``'s registration from the cluster into this registry once it is
    published there (the link, meanwhile, retries: it finds the registration then)."""
    # Imported here: only a coordinator that calls instances elsewhere needs pyzmq.
    from ..logstore.registrations import fetch_registration
    from ..raft.errors import RaftError

    shown = without_secret(cluster)
    while True:
        try:
            doc = await fetch_registration(cluster, dest)
        except RaftError as err:
            c.log(f"reading the registration of {dest!r} from {shown}: {err}")
            doc = None
        if doc is not None:
            try:
                await asyncio.to_thread(registry.adopt, doc, c.home,
                                        f"the registration of {dest} in {shown}")
            except RegistryError as err:
                c.log(f"calls to {dest!r} will wait: {err}")
            else:
                c.log(f"took the registration of {dest!r} from {shown}")
            return
        await asyncio.sleep(ADOPT_RETRY)


def _refresher(c: Coordinator, dest: str) -> Callable[[], None]:
    """What a link to ``dest`` calls when it cannot connect: a destination whose
    registration was taken from the cluster may have been registered again since (new
    ports or hosts, published there again), and this registry would keep the old one for
    good. Looks at most every ``REFRESH_EVERY`` seconds; a registration made here is
    never replaced."""
    next_look = 0.0

    def unreachable() -> None:
        nonlocal next_look
        now = time.monotonic()
        if now < next_look or not c.registry_cluster:
            return
        next_look = now + REFRESH_EVERY
        c.spawn(_refresh(c, c.registry_cluster, dest))

    return unreachable


async def _refresh(c: Coordinator, cluster: str, dest: str) -> None:
    """Take ``dest``'s registration from the cluster again if it was taken from there
    and the cluster now holds another."""
    from ..logstore.registrations import fetch_registration
    from ..raft.errors import RaftError

    if not await asyncio.to_thread(registry.adopted, dest, c.home):
        return
    shown = without_secret(cluster)
    try:
        doc = await fetch_registration(cluster, dest)
    except RaftError as err:
        c.log(f"reading the registration of {dest!r} from {shown}: {err}")
        return
    if doc is None:
        return

    def take() -> bool:
        try:
            if registry.published(registry.load(dest, c.home), c.home) == doc:
                return False
        except RegistryError:
            pass  # damaged here: the cluster's is better
        if not registry.adopted(dest, c.home):  # registered here meanwhile
            return False
        registry.adopt(doc, c.home, f"the registration of {dest} in {shown}")
        return True

    try:
        if await asyncio.to_thread(take):
            c.log(f"took a newer registration of {dest!r} from {shown} (its link could "
                  "not connect to the one taken before)")
    except RegistryError as err:
        c.log(f"the registration of {dest!r} in {shown} was not taken: {err}")


def open_link(c: Coordinator, dest: str) -> OutboundLink:
    """The link that runs the core's outbox for ``dest`` (started, if links may run)."""
    link = c.links.get(dest)
    if link is not None:
        return link
    try:
        registry.load(dest, c.home)
    except RegistryError as err:
        if c.registry_cluster and not registry.registration_exists(dest, c.home):
            c.log(f"calls to {dest!r} wait for its registration from the cluster at "
                  f"{without_secret(c.registry_cluster)}")
            c.spawn(_adopt(c, c.registry_cluster, dest))
        else:
            c.log(f"calls to {dest!r} will wait: {err}")
    # Flushed by the binding's reader after each read (``reading``), not a loop turn later.
    link = OutboundLink(c.name, dest, c.secret, _address(c, dest), c.log,
                        box=c.core.outboxes[dest], flush_soon=False,
                        unreachable=_refresher(c, dest))
    c.links[dest] = link
    if c.links_active:
        link.start()
    return link
