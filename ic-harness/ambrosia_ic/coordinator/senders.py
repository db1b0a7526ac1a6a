"""Whether a sender may link to us: registered here, or published in the cluster this
coordinator reads registrations from (``ic --registry``, $AMBROSIA_REGISTRY, else its
own ``raft://`` log store). A sender found there is taken into the local registry, as a
caller takes a callee's (``directory``), so the calls it makes can be answered: the
callee's machines need no copy of every caller's registration.

The handshake waits for the cluster only a short while; the lookup itself goes on, so a
slow cluster still answers the sender's next try. A "not there" answer stands for a few
seconds: a stranger who knows the link secret cannot make us read the cluster at every
attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from ambrosia_core.errors import AmbrosiaError
from ambrosia_ic.errors import RegistryError

from .. import registry
from ..logstore.registrations import fetch_registration
from ..registry.raft_address import without_secret

__all__ = ["FORGET_UNKNOWN", "LOOKUP_WAIT", "KnownSenders"]

LOOKUP_WAIT = 3.0  # seconds a handshake waits for the cluster (the sender retries anyway)
FORGET_UNKNOWN = 3.0  # seconds a sender the cluster did not know stays refused unasked
LOOKUP_TIMEOUT = 10.0  # seconds one request to the cluster may take
MAX_UNKNOWN = 1024  # remembered strangers: names cost memory too


class KnownSenders:
    """The senders the link server accepts.

    Args:
        home: this coordinator's registry.
        cluster: where registrations this registry lacks are published ("" for nowhere);
            asked at each lookup, since ``ic --registry`` is set after the coordinator is
            made.
        log: one line per adoption, or per failed read of the cluster.
        spawn: runs a lookup as a task the coordinator cancels when it stops.
    """

    def __init__(self, home: Path, cluster: Callable[[], str], log: Callable[[str], None],
                 spawn: Callable[[Coroutine[Any, Any, bool]], asyncio.Task[bool]], *,
                 wait: float = LOOKUP_WAIT, forget: float = FORGET_UNKNOWN) -> None:
        self._home = home
        self._cluster = cluster
        self._log = log
        self._spawn = spawn
        self._wait = wait
        self._forget = forget
        self._unknown: dict[str, float] = {}  # name -> when the cluster may be asked again
        self._looking: dict[str, asyncio.Task[bool]] = {}

    async def known_sender(self, name: str) -> bool:
        """Whether ``name`` is registered here, or is now (taken from the cluster)."""
        if registry.registration_exists(name, self._home):
            # A damaged registration is refused, not overwritten with the cluster's.
            return self._loads(name)
        cluster = self._cluster()
        if not cluster:
            return False
        if self._unknown.get(name, 0.0) > time.monotonic():
            return False
        task = self._looking.get(name)
        if task is None:
            task = self._spawn(self._look_up(cluster, name))
            self._looking[name] = task
            task.add_done_callback(lambda _: self._looking.pop(name, None))
        # Not ``wait_for``: a handshake that gives up must not cancel the lookup.
        done, _ = await asyncio.wait({task}, timeout=self._wait)
        return bool(done) and not task.cancelled() and task.result()

    def _loads(self, name: str) -> bool:
        try:
            registry.load(name, self._home)
        except RegistryError:
            return False
        return True

    async def _look_up(self, cluster: str, name: str) -> bool:
        shown = without_secret(cluster)
        try:
            doc = await fetch_registration(cluster, name, LOOKUP_TIMEOUT)
        except AmbrosiaError as err:  # unreachable or unreadable: refused, not stopped
            self._log(f"reading the registration of {name!r} from {shown}: {err}")
            doc = None
        if doc is None:
            self._remember_unknown(name)
            return False
        where = f"the registration of {name} in {shown}"
        try:
            if not isinstance(doc, dict) or doc.get("instance_name") != name:
                raise RegistryError(f"{where}: names another instance")
            if registry.registration_exists(name, self._home):
                return self._loads(name)  # registered here meanwhile: that one counts
            await asyncio.to_thread(registry.adopt, doc, self._home, where)
        except (RegistryError, OSError) as err:
            self._log(f"links from {name!r} are refused: {err}")
            self._remember_unknown(name)
            return False
        self._log(f"took the registration of {name!r} from {shown}")
        return True

    def _remember_unknown(self, name: str) -> None:
        now = time.monotonic()
        if len(self._unknown) >= MAX_UNKNOWN:
            for old in [n for n, until in self._unknown.items() if until <= now]:
                del self._unknown[old]
            while len(self._unknown) >= MAX_UNKNOWN:
                del self._unknown[next(iter(self._unknown))]  # the oldest answer
        self._unknown.pop(name, None)  # re-inserted last: the newest
        self._unknown[name] = now + self._forget
