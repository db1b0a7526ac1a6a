"""A Raft log store's claim and fenced append as steps with no I/O: what ``raft_store``
runs over its cluster client, and what the simulator (``tests/sim/raftlog``) runs over
its simulated cluster, so both take the same decisions in the same order.

A ``RaftTenure`` holds what a store knows of its instance's log (the ``InstanceView``
every reader applies, and the ``Silence`` of the current epoch) and the epoch it holds.
``claim`` and ``append`` are generators: each yields what it needs done (``CatchUp``: read
the log into the view; ``Propose``: send an entry and answer with its request id and
index once committed; ``Renewed``: tell the owner the epoch it renewed with) and takes
the answer, so the driver decides only how (and how long) each step takes. The rules
(``raft_rules``, called through the module so that the simulator's mutants of them reach
here too):

- a claim reads first, and claims nothing if a newer epoch came than the one the caller
  found silent (``after``), or (``if_silent``) if the holder spoke meanwhile; it holds the
  epoch only if its own claim is the first of that epoch in the log;
- an append sends nothing from a store whose epoch is superseded (``LockLostError``);
  after more than half a lease since its last entry that counted it reads the log first
  and renews by claiming the next epoch itself (a look that finds no claim does not stop
  one in flight), unless its other append (the heartbeat beside the committer) renewed
  meanwhile; an entry counts only once the store read up to it and found no newer claim
  before it; one that its own store's renewal (by its other append) came before is sent
  again in the renewed epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

import attrs

from ambrosia_ic.errors import LockLostError

from . import raft_rules
from .raft_entries import (
    EpochClaimed,
    Event,
    Fenced,
    Heartbeat,
    InstanceView,
    Records,
    encode_claim,
)
from .raft_rules import Silence

__all__ = ["CatchUp", "Propose", "RaftStep", "RaftTenure", "Renewed", "Steps"]


@attrs.frozen
class CatchUp:
    """Read the committed log into the view, at least up to ``until`` (None: as far as
    the cluster has committed)."""

    until: int | None = None


@attrs.frozen
class Propose:
    """Send ``data`` as one entry; answer with ``(request id, log index)`` once the
    cluster committed it."""

    data: bytes


@attrs.frozen
class Renewed:
    """The primary renewed its lease by claiming ``epoch``."""

    epoch: int


RaftStep = CatchUp | Propose | Renewed
Steps = Generator[RaftStep, Any, Any]


class RaftTenure:
    """One store's view of instance ``name``'s log and the epoch it holds.

    Args:
        now: the clock (seconds; monotonic).
        lease: the seconds of silence after which a standby may claim.
        rediscovery: what a stall adds to the silence's restart (``Silence``).
    """

    def __init__(self, name: str, now: Callable[[], float], lease: float,
                 rediscovery: float = 0.0) -> None:
        self.name = name
        self.now = now
        self.lease = lease
        self.view = InstanceView(name)
        self.silence = Silence(now(), lease, rediscovery)
        self.held: int | None = None
        self.holder: dict[str, Any] = {}  # what this store's claims say of it
        # When this store's last entry that counted (its claim, or an append) was sent.
        self.counted_sent_at = -float("inf")
        self.fenced: set[int] = set()  # the indexes of entries read that no reader takes

    def read(self, asked: float, events: Iterable[Event]) -> None:
        """A catch-up asked at ``asked`` was answered now, bringing ``events`` (already
        applied to the view): the silence learns of a stall, or of the epoch's holder."""
        answered = self.now()
        self.silence.read(asked, answered)
        events = list(events)
        if any(isinstance(ev, (Records, Heartbeat, EpochClaimed)) and ev.epoch == self.view.epoch
               for ev in events):
            self.silence.saw_epoch(answered)
        self.fenced.update(ev.index for ev in events if isinstance(ev, Fenced))

    def silent_for(self) -> float:
        """Seconds since this reader last saw anything of the current epoch (infinite
        once its holder resigned)."""
        return self.silence.silent_for(self.now(), self.view.resigned)

    def check(self) -> None:
        """Raises LockLostError if a newer epoch was claimed (as far as the view knows), or
        this store holds none (never claimed, or resigned)."""
        if not raft_rules.superseded(self.held, self.view.epoch):
            return
        if self.held is None:
            raise LockLostError(f"raft log of {self.name}: this store holds no epoch (not "
                                "claimed, or resigned); it writes nothing")
        # Said as it is: the cluster takes appends in order with no condition, so an entry
        # this primary sent before it saw the claim may land after it; readers skip every
        # entry of an older epoch, and it sends nothing more.
        raise LockLostError(
            f"raft log of {self.name}: epoch {self.view.epoch} was claimed after this "
            f"primary's epoch {self.held}; it was fenced off and writes no more (an entry it "
            "sent before it saw the claim counts for no reader)")

    def claim(self, holder: dict[str, Any], *, after: int | None = None,
              if_silent: bool = False) -> Generator[RaftStep, Any, bool]:
        """Claim the epoch after the newest one the view knows; True if this claim was the
        first of its epoch in the log (this store is then its holder).

        Args:
            after: the epoch the caller found silent. If catching up finds a newer one,
                nothing is claimed: another standby took over meanwhile, and its claim is
                the new primary's first sign of life (claiming past it would fence a
                primary nobody found silent, a second takeover right after the first).
            if_silent: claim only if, once caught up, the epoch's holder is still silent
                past the lease (the catch-up may have stalled, which restarts the silence).
        """
        yield CatchUp()
        if after is not None and raft_rules.superseded(after, self.view.epoch):
            return False
        if if_silent and not raft_rules.may_claim(self.silent_for(), self.lease):
            return False
        epoch = self.view.epoch + 1
        sent = self.now()
        reqid, index = yield Propose(encode_claim(self.name, epoch, holder))
        yield CatchUp(index)
        if self.view.epoch == epoch and self.view.claim_reqid == reqid:
            self.held = epoch
            self.holder = holder
            self.counted_sent_at = sent
            return True
        return False

    def append(self, encode: Callable[[int], bytes]) -> Generator[RaftStep, Any, int]:
        """Send the entry ``encode(epoch held)``; its log index once it counts.

        Raises:
            LockLostError: this store does not hold the newest epoch (not claimed, fenced
                by a newer claim, or its renewal lost); the entry counts for no reader.
        """
        self.check()
        while raft_rules.must_look(self.now(), self.counted_sent_at, self.lease):
            # Long enough since the last entry that counted for a standby to have claimed
            # (a pause, a stall, a leader election). A look that finds no claim does not
            # stop one in flight: the primary renews by claiming the next epoch itself,
            # which only the first claim of that epoch wins; losing it, it sends nothing.
            held = self.held
            yield CatchUp()
            self.check()
            if self.held != held:
                continue  # another append of this store renewed meanwhile
            if not (yield from self.claim(self.holder, after=held)):
                self.check()  # another claim came first: the view is past ``held``
                if self.held != held:
                    continue  # this store's own renewal, by its other append
                raise LockLostError(f"raft log of {self.name}: epoch {held} not renewed")
            assert self.held is not None
            yield Renewed(self.held)
        while True:
            self.check()
            epoch = self.held
            assert epoch is not None
            sent = self.now()
            _, index = yield Propose(encode(epoch))
            yield CatchUp(index)
            self.check()  # a claim committed before our entry: everyone ignores it
            if index not in self.fenced:
                break
            self.fenced.discard(index)
            if self.held == epoch:  # only a newer claim fences an entry: not this store's
                raise LockLostError(f"raft log of {self.name}: entry {index} of epoch "
                                    f"{epoch} was skipped by its readers")
            # This store's own renewal (by its other append) landed before the entry,
            # which every reader skips: it goes again, in the epoch renewed.
        self.counted_sent_at = sent
        return int(index)
