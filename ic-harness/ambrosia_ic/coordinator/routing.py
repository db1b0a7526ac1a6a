"""Where the binding's outputs go, the hot path of the coordinator's core
(``core.CoordinatorCore`` is a ``Routing``), without I/O: each replayable output into
the replay digest, then a self-call or an Impulse to the inputs that wait for the log,
any other call to its destination's outbox (made, and its link asked for, on first
use)."""

from __future__ import annotations

from ambrosia_core.wire import OutgoingRpc, check_bytes

from ..links.outbox import LinkOutbox
from ..logstore import is_impulse
from .core_actions import WAKE, Action, Digest, LogLine, OpenLink
from .frames import OutgoingFrame
from .group_commit import GroupCommit, PendingInput
from .phase import Phase
from .self_calls import SelfCalls

__all__ = ["Routing"]


class Routing:
    """The routing steps of the core; the state they read is the core's."""

    name: str
    keeps_early_impulses: bool
    binding_primary: bool
    phase: Phase
    group: GroupCommit
    self_calls: SelfCalls
    outboxes: dict[str, LinkOutbox]
    last_delivered: int
    digest: Digest | None
    digest_skip: int
    actions: list[Action]
    _woken: bool

    def logged(self, sender: str) -> int:
        """The last call from ``sender`` the log holds (0: none)."""
        return self.group.inputs.get(sender, 0)

    def route(self, rpc: OutgoingRpc) -> None:
        """One output the general decoder read."""
        self.route_frame(rpc.destination, rpc.incoming().encode(), rpc.encode(),
                         is_impulse(rpc))

    def route_frames(self, frames: list[OutgoingFrame]) -> None:
        """``route_frame`` for each of a read's outputs in turn (the hot path). A run of
        replayable calls to one other instance goes to its outbox and into the digest in
        one call each: ``last_delivered`` cannot change within a read, and the digest and
        the outbox keep their own order."""
        i = 0
        n = len(frames)
        name = self.name
        while i < n:
            dest, _, _, impulse = frames[i]
            digest = self.digest
            if impulse or dest == "" or dest == name or digest is None or self.digest_skip:
                self.route_frame(*frames[i])
                i += 1
                continue
            j = i + 1
            while j < n and frames[j][0] == dest and not frames[j][3]:
                j += 1
            run = frames[i:j] if i or j < n else frames
            digest.add_run([check_bytes(f[2]) for f in run], self.last_delivered)
            (self.outboxes.get(dest) or self.outbox(dest)).add_run([f[1] for f in run])
            i = j

    def route_frame(self, destination: str, incoming: bytes, frame: bytes,
                    impulse: bool) -> None:
        """One output of the binding, as bytes: ``frame`` as the binding sent it,
        ``incoming`` the same call in the form its destination receives.

        Replayable outputs are numbered per destination, the instance itself included: a
        replay that regenerates them can then tell which ones were already logged (by
        us, for self-calls, or by the destination, for links). Impulses carry no number:
        at most once."""
        if not impulse and self.digest is not None:
            if self.digest_skip:
                self.digest_skip -= 1
            else:
                self.digest.add(check_bytes(frame), self.last_delivered)
        if destination == "" or destination == self.name:
            if impulse:
                self.submit((None, None, incoming))
                return
            seq = self.self_calls.number(incoming, self.logged(self.name))
            if seq is not None:  # else a replay regenerated a call the log holds
                self.submit((self.name, seq, incoming))
        else:
            box = self.outboxes.get(destination) or self.outbox(destination)
            if impulse:
                box.add_impulse(incoming)
            else:
                box.add(incoming)

    def outbox(self, dest: str, next_seq: int = 1,
               unacked: list[tuple[int, bytes]] | None = None) -> LinkOutbox:
        """The outbox of ``dest``, made (and its link asked for) on first use."""
        box = self.outboxes.get(dest)
        if box is None:
            box = self.outboxes[dest] = LinkOutbox(next_seq, unacked)
            self.actions.append(OpenLink(dest))
        return box

    def submit(self, item: PendingInput) -> None:
        """Queue an input for the log (it is committed only once live). An Impulse the
        binding sends while recovering is dropped: a replay regenerates what it replays
        and its Impulses were the old life's (unless the binding was made primary, or
        a replica's sink keeps them for when it takes over)."""
        if (item[0] is None and self.phase is not Phase.LIVE and not self.keeps_early_impulses
                and not self.binding_primary):
            self.actions.append(LogLine("dropped an Impulse the binding sent while "
                                        "recovering"))
            return
        self.group.pending.append(item)
        if self.phase is Phase.LIVE and not self._woken:  # ``_wake``, inline: the hot path
            self._woken = True
            self.actions.append(WAKE)
