"""Routing the binding's outputs: self-calls into the commit queue, calls to other
instances onto outbound links, and the numbering that lets a replay drop what was
already logged.

Replayable outputs are numbered per destination, the instance itself included: a replay
that regenerates them can then tell which ones were already logged (by us, for
self-calls, or by the destination, for links). Impulses carry no number: at most once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ambrosia_py.errors import RegistryError
from ambrosia_py.wire import OutgoingRpc, check_bytes

from .. import registry
from ..lease import current_primary
from ..links import OutboundLink
from ..logstore import is_impulse
from ..registry.raft_address import without_secret
from .cluster_primary import ClaimMark, ClusterPrimary, claimed_address, known_claim
from .phase import Phase

if TYPE_CHECKING:
    from ambrosia_py.wire.outgoing import OutgoingFrame

    from .lifecycle import Coordinator, PendingInput

ADOPT_RETRY = 1.0  # seconds between looks for a registration not yet in the cluster
# Seconds between looks in the cluster for a newer registration of a destination taken
# from there, while its link cannot connect.
REFRESH_EVERY = 2.0

__all__ = ["link_to", "restore", "route", "route_frame", "route_frames", "snapshot", "submit",
           "trim_self"]

def route(c: Coordinator, rpc: OutgoingRpc) -> None:
    """One output of the binding that the general decoder read (anything the bytes path
    of ``reading`` leaves to it)."""
    route_frame(c, rpc.destination, rpc.incoming().encode(), rpc.encode(), is_impulse(rpc))


def route_frames(c: Coordinator, frames: list[OutgoingFrame]) -> None:
    """``route_frame`` for each of a read's outputs in turn (the hot path). A run of
    replayable calls to one other instance goes to its link and into the digest in one
    call each: ``c.last_delivered`` cannot change within a read, and the digest and the
    link keep their own order."""
    i = 0
    n = len(frames)
    while i < n:
        dest, _, _, impulse = frames[i]
        digest = c.digest
        if impulse or dest == "" or dest == c.name or digest is None or c.digest_skip:
            route_frame(c, *frames[i])
            i += 1
            continue
        j = i + 1
        while j < n and frames[j][0] == dest and not frames[j][3]:
            j += 1
        run = frames[i:j] if i or j < n else frames
        digest.add_run([check_bytes(f[2]) for f in run], c.last_delivered)
        (c.links.get(dest) or link_to(c, dest)).add_run([f[1] for f in run])
        i = j


def route_frame(c: Coordinator, destination: str, incoming: bytes, frame: bytes,
                impulse: bool) -> None:
    """One output of the binding, as bytes (the hot path: one call per RPC it sends).

    ``frame`` is the output as the binding sent it, ``incoming`` the same call in the
    form its destination receives."""
    if not impulse and c.digest is not None:
        if c.digest_skip:
            c.digest_skip -= 1
        else:
            c.digest.add(check_bytes(frame), c.last_delivered)
    if destination == "" or destination == c.name:
        if impulse:
            submit(c, (None, None, incoming))
            return
        seq = c.self_calls.number(incoming, c.inputs.get(c.name, 0))
        if seq is not None:  # else a replay regenerated a call the log holds
            submit(c, (c.name, seq, incoming))
    else:
        link = c.links.get(destination) or link_to(c, destination)
        if impulse:
            link.add_impulse(incoming)
        else:
            link.add(incoming)


def submit(c: Coordinator, item: PendingInput) -> None:
    """Queue an input for the committer (it commits only once live)."""
    if (item[0] is None and c.phase is not Phase.LIVE and not c.sink.keeps_early_impulses
            and not c.binding_primary):
        c.log("dropped an Impulse the binding sent while recovering")
        return
    c.pending.append(item)
    if c.phase is Phase.LIVE:
        c.wake.set()


def trim_self(c: Coordinator) -> None:
    """Forget self-calls the log now holds."""
    c.self_calls.trim(c.inputs.get(c.name, 0))


def snapshot(c: Coordinator) -> dict[str, Any]:
    """Per destination, the next number and the outputs not yet acknowledged."""
    out: dict[str, Any] = {d: link.snapshot() for d, link in c.links.items()}
    out[c.name] = c.self_calls.snapshot()
    return out


def restore(c: Coordinator, outputs: dict[str, dict[str, Any]]) -> None:
    """Take back a checkpoint's outputs snapshot (``c.inputs`` already restored)."""
    for dest, out in outputs.items():
        if dest == c.name:  # made before the checkpoint, never logged: log them now
            for seq, body in c.self_calls.restore(out, c.inputs.get(c.name, 0)):
                c.pending.append((c.name, seq, body))
        else:
            unacked = [(int(s), bytes(b)) for s, b in out["unacked"]]
            link = _make_link(c, dest, out["next"], unacked)
            if c.links_active:
                link.start()


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


def _make_link(c: Coordinator, dest: str, next_seq: int = 1,
               unacked: list[tuple[int, bytes]] | None = None) -> OutboundLink:
    # Flushed by the binding's reader after each read (``reading``), not a loop turn later.
    link = OutboundLink(c.name, dest, c.secret, _address(c, dest), c.log, next_seq, unacked,
                        flush_soon=False, unreachable=_refresher(c, dest))
    c.links[dest] = link
    return link


def link_to(c: Coordinator, dest: str) -> OutboundLink:
    """The outbound link to ``dest``, made (and started, if links may run) on first use."""
    link = c.links.get(dest)
    if link is None:
        try:
            registry.load(dest, c.home)
        except RegistryError as err:
            if c.registry_cluster and not registry.registration_exists(dest, c.home):
                c.log(f"calls to {dest!r} wait for its registration from the cluster at "
                      f"{without_secret(c.registry_cluster)}")
                c.spawn(_adopt(c, c.registry_cluster, dest))
            else:
                c.log(f"calls to {dest!r} will wait: {err}")
        link = _make_link(c, dest)
        if c.links_active:
            link.start()
    return link
