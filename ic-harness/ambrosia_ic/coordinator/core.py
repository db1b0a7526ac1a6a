"""What a coordinator decides for its instance, without I/O: a sans-IO machine.

One way, as h11's ``Connection``: events in, actions out. Every input is a method call
(an event), and the shell never assigns a field of the core:

- ``receive_binding``: bytes read from the binding (its outputs are routed, its other
  messages checked and acted on; malformed bytes or a message out of turn raise);
- ``link_record``: a record from a linked sender (the new calls are queued once);
- ``take`` and ``durable``: the next log record is taken, then made durable by the shell;
- ``begin_first_start``, ``first_record``, ``begin_recovery``, ``replayed``,
  ``use_digest``, ``checkpoint_loaded``, ``become_primary``, ``set_phase``: the steps of
  the start-up flows and of a replica's;
- ``switch_log``, ``checkpoint_saved``, ``ask_checkpoint``: the log's switches and the
  checkpoints asked of the binding;
- ``followed``, ``caught_up``: records a follower delivers, which another replica wrote.

Every effect of an event comes out as one of the typed actions of ``core_actions``,
taken in one place (``take_actions``; the shell's ``actions.run``) and run in order:
deliver a request to the binding, deliver a durable record and acknowledge its calls to
their senders, wake the committer, open a link for a new destination, hand over a
checkpoint the binding streamed back (with the log's position it is saved with) or the
InitialMessage, log a line. Two things the shell pulls instead, because the pull is the
hot path's whole point: the next record to write (``take``, between the events that
fill it and ``durable``), and each destination's ``LinkOutbox`` (what to write on its
link, as the link may).

The rules themselves are the small sans-IO pieces beside this module, each checked on
its own: ``group_commit``, ``intake``, ``self_calls``, ``checkpoint_plan``, ``phase``,
and ``links.outbox.LinkOutbox``; ``binding_stream`` cuts the binding's bytes into what
is routed, and ``routing`` (the core's base) routes it. The replay digest is a port
(``Digests``): the shell's writes files, a simulation's keeps nothing.
"""

from __future__ import annotations

from typing import Any

from ambrosia_core.errors import UnexpectedMessageError
from ambrosia_core.wire import (
    AttachTo,
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    InitialMessage,
    Message,
    OutgoingRpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    UpgradeTakeCheckpoint,
    encode_control_record,
)

from ..links.outbox import LinkOutbox
from .binding_stream import BindingStream, CheckpointStream
from .checkpoint_plan import CheckpointPlan, Event
from .core_actions import (
    WAKE,
    Action,
    CheckpointData,
    CheckpointReceived,
    Deliver,
    Digest,
    Digests,
    InitialReceived,
    LogLine,
    OpenLink,
    Position,
    Wake,
)
from .frames import LinkRecord
from .group_commit import Durable, GroupCommit, TakenRecord
from .intake import LinkIntake
from .phase import Phase, next_phase
from .routing import Routing
from .self_calls import SelfCalls

# The actions and the digest port are importable from here, where the core is.
__all__ = ["WAKE", "Action", "CheckpointData", "CheckpointReceived", "CoordinatorCore",
           "Deliver", "Digest", "Digests", "Durable", "InitialReceived", "LogLine", "OpenLink",
           "Position", "Wake"]


class CoordinatorCore(Routing):
    """The decisions of one instance's coordinator.

    Args:
        name: the instance's name.
        cid: the committer id stamped into every record.
        trigger_bytes: a log this large is switched (and, standalone, checkpointed).
        keeps_early_impulses: Impulses the binding sends before the coordinator is live
            are kept (a replica's sink), not dropped.
        digests: where the replay digest goes (None: nowhere).
        who: how errors and log lines name this coordinator (default: ``name``).
    """

    def __init__(self, name: str, cid: int, *, trigger_bytes: int = 1 << 62,
                 keeps_early_impulses: bool = False, digests: Digests | None = None,
                 who: str | None = None) -> None:
        self.name = name
        self.who = who or name
        self.cid = cid
        self.trigger_bytes = trigger_bytes
        self.keeps_early_impulses = keeps_early_impulses
        self.digests = digests
        self.phase = Phase.STARTING
        self.group = GroupCommit(cid)
        self.intake = LinkIntake(self.logged)
        self.self_calls = SelfCalls()
        self.outboxes: dict[str, LinkOutbox] = {}
        self.ckpt = CheckpointPlan()
        # Set once the binding was asked for the checkpoint that makes it primary (first
        # start, live upgrade): its Impulses from then on are a primary's inputs, to be
        # committed once live, even by a replica (which otherwise drops early ones).
        self.binding_primary = False
        self.awaiting_initial = False  # a first start waits for the InitialMessage
        self.last_delivered = -1  # the last record the binding received
        self.digest: Digest | None = None
        self.digest_skip = 0  # outputs a recovery's replay regenerates, digested already
        self.actions: list[Action] = []
        self._woken = False  # a Wake waits in ``actions`` (one is enough)
        self._checkpoint = CheckpointStream()
        self._stream = BindingStream(self.route_frames, self.on_message)

    # ------------------------------------------------------------------ state
    def set_phase(self, new: Phase) -> None:
        self.phase = next_phase(self.who, self.phase, new)

    def take_actions(self) -> list[Action]:
        """What the events since the last take ask the shell to do, in order."""
        actions, self.actions = self.actions, []
        self._woken = False
        return actions

    def _wake(self) -> None:
        if not self._woken:
            self._woken = True
            self.actions.append(WAKE)

    # ------------------------------------------------------------------ the binding
    def receive_binding(self, data: bytes) -> None:
        """Bytes read from the binding (``binding_stream.BindingStream`` cuts them into
        runs of plain RPC frames and other messages).

        Raises:
            RemoteProtocolError: malformed bytes.
            UnexpectedMessageError: a message a binding does not send, or out of turn.
        """
        self._stream.receive(data)

    def on_message(self, ev: Any) -> None:
        """One decoded message from the binding.

        Raises:
            UnexpectedMessageError: a message a binding does not send, or one out of turn.
        """
        t = type(ev)
        if t is OutgoingRpc:
            self.route(ev)
        elif t is RpcBatch:
            for rpc in ev.rpcs:
                self.route(rpc)
        elif t is CheckpointChunk:
            self._checkpoint.chunk(ev.data)
        elif t is Checkpoint:
            self._begin_checkpoint(ev)
        elif t is CheckpointEnd:
            self.actions.append(self._checkpoint.end())
        elif t is AttachTo:
            if ev.destination not in ("", self.name):
                self.outbox(ev.destination)
        elif t is TakeCheckpoint:
            if self.phase is Phase.LIVE and self.ckpt.on(Event.ASKED):
                self._wake()
        elif t is InitialMessage:
            if not self.awaiting_initial:
                raise UnexpectedMessageError("an InitialMessage outside a first start")
            self.awaiting_initial = False
            self.actions.append(InitialReceived(ev))
        else:
            raise UnexpectedMessageError(f"{t.__name__} from a binding")

    # ------------------------------------------------------------------ links in
    def link_record(self, sender: str, rec: LinkRecord) -> None:
        """One record from a linked sender: its new calls are queued as the bytes that
        came; which are new is ``LinkIntake``'s rule.

        Raises:
            UnexpectedMessageError: the record leaves a gap after what was taken.
        """
        if rec.seq_id < 0:
            self.submit((None, None, rec.body))  # Impulses: unnumbered, at most once
            return
        body = self.intake.take(sender, rec.seq_id, rec.calls, rec.body)
        if body is not None:
            self.submit((sender, rec.seq_id, body))

    # ------------------------------------------------------------------ the log
    def first_record(self, initial: InitialMessage) -> None:
        """A first start: the InitialMessage, echoed whole, is record 0's first input
        (with the self-calls the binding made while starting)."""
        self.group.pending.appendleft((None, None, initial.encode()))

    def take(self, max_bytes: int, epoch: int | None = None) -> TakenRecord:
        """The next record to write and sync (see ``GroupCommit.take``)."""
        return self.group.take(max_bytes, epoch)

    def durable(self, record: TakenRecord, log_size: int) -> None:
        """``record`` is durable (the log now holds ``log_size`` bytes): what it lets go
        (``Durable``: its bytes for the binding, its calls' positions for their
        senders)."""
        self.actions.append(self.group.durable(record, self.name))
        self.last_delivered = record.seq_id
        self.self_calls.trim(self.logged(self.name))
        if log_size >= self.trigger_bytes:
            self.ckpt.on(Event.SIZE_REACHED)

    def followed(self, seq_id: int, inputs: dict[str, int]) -> None:
        """A follower delivered record ``seq_id``, written by another replica: the
        log's position moves past it (call ``caught_up`` after a run of them)."""
        self.last_delivered = seq_id
        self.group.next_seq = seq_id + 1
        self.group.inputs.update(inputs)

    def caught_up(self) -> None:
        """After followed records: the self-calls the log now holds are forgotten, and
        dropped from what waits (the replica that wrote them logged them)."""
        done = self.logged(self.name)
        self.self_calls.trim(done)
        pending = self.group.pending
        kept = [p for p in pending
                if not (p[0] == self.name and p[1] is not None and p[1] <= done)]
        pending.clear()
        pending.extend(kept)

    # ------------------------------------------------------------------ start-up
    def begin_first_start(self) -> None:
        """A first start: the binding is asked for checkpoint 1 as it becomes primary
        (``Deliver``). It answers with its InitialMessage (``InitialReceived``), then
        the checkpoint (``CheckpointReceived``); the shell saves that, opens log 1, and
        commits record 0 (``first_record``) before going live."""
        self.set_phase(Phase.FIRST_START)
        self.awaiting_initial = True
        self.ask_checkpoint(1, TakeBecomingPrimaryCheckpoint())

    def begin_recovery(self, start_seq: int, next_seq: int, inputs: dict[str, int],
                       outputs: dict[str, dict[str, Any]]) -> None:
        """A recovery from a checkpoint whose interval starts at record ``start_seq``
        and a log that holds records up to ``next_seq - 1`` (``inputs``: the positions
        after them). The shell delivers the checkpoint and those records (``replayed``
        after each run of them), then asks for the checkpoint that makes the binding
        primary."""
        self.set_phase(Phase.RECOVERING)
        self.restore(next_seq, inputs, outputs)
        self.last_delivered = start_seq - 1

    def replayed(self, last: int) -> None:
        """The shell delivered the log's records up to ``last`` to the binding (a
        recovery's replay): the outputs it sends from here on follow them."""
        self.last_delivered = last

    def checkpoint_loaded(self, next_seq: int, inputs: dict[str, int],
                          outputs: dict[str, dict[str, Any]]) -> None:
        """A follower loads a checkpoint taken at record ``next_seq`` (``restore``); the
        binding gets it next, so it has what every record before it did."""
        self.restore(next_seq, inputs, outputs)
        self.last_delivered = next_seq - 1

    def use_digest(self, digest: Digest | None, skip: int = 0) -> None:
        """Outputs go to ``digest`` from now on (None: nowhere); it holds the first
        ``skip`` a recovery's replay regenerates already."""
        self.digest = digest
        self.digest_skip = skip

    # ------------------------------------------------------------------ checkpoints
    def switch_log(self, n: int, checkpoint: bool) -> None:
        """The committer moves to log ``n`` between two records. With ``checkpoint``
        (a standalone coordinator), the binding is asked for checkpoint ``n``
        (``Deliver``), to be saved with the log's position at the switch (its
        ``CheckpointReceived``); call ``checkpoint_saved`` once it is durable."""
        if not checkpoint:
            self.ckpt.on(Event.SWITCHED_ONLY)
            return
        self.ckpt.on(Event.SWITCHED)
        self.ask_checkpoint(n, TakeCheckpoint())

    def checkpoint_saved(self) -> None:
        """The checkpoint of the last switch is durable (one asked for meanwhile is
        taken next)."""
        if self.ckpt.on(Event.SAVED) and self.phase is Phase.LIVE:
            self._wake()

    def ask_checkpoint(self, n: int, request: Message) -> None:
        """Checkpoint ``n`` is asked for with ``request`` (``Deliver``), at the log's
        position now. The binding answers with a Checkpoint message, chunks and the end
        of the stream (``CheckpointReceived``)."""
        self._checkpoint.ask(n, self.position())
        if isinstance(request, (TakeBecomingPrimaryCheckpoint, UpgradeTakeCheckpoint)):
            self.binding_primary = True  # it is primary once it has sent this checkpoint
        self.actions.append(Deliver(encode_control_record(self.cid, request)))

    def become_primary(self) -> None:
        """A binding that finished its replay is told it is primary (``Deliver``)."""
        self.binding_primary = True
        self.actions.append(Deliver(encode_control_record(self.cid, BecomingPrimary())))

    def position(self) -> Position:
        """The log's position: the next record's sequence id, and per sender the last
        call the log holds (a copy)."""
        return self.group.next_seq, dict(self.group.inputs)

    def _begin_checkpoint(self, ev: Checkpoint) -> None:
        """The outputs the binding sent before its Checkpoint message came from records
        before the checkpoint, so the snapshot of unacknowledged outputs stored with it
        is taken exactly now; from here on its outputs belong to the next interval, and
        so does the digest."""
        n = self._checkpoint.begin(ev.encode(), self.snapshot, self.awaiting_initial)
        if self.digests is not None:
            self.digest = self.digests.begin(n)
        self.digest_skip = 0

    @property
    def checkpoint_expected(self) -> int | None:
        """The number of the checkpoint asked for and not yet received, if any."""
        return self._checkpoint.expected

    def snapshot(self) -> dict[str, Any]:
        """Per destination, the next number and the outputs not yet acknowledged."""
        out: dict[str, Any] = {d: box.snapshot() for d, box in self.outboxes.items()}
        out[self.name] = self.self_calls.snapshot()
        return out

    def restore(self, next_seq: int, inputs: dict[str, int],
                outputs: dict[str, dict[str, Any]]) -> None:
        """Take back a checkpoint's position and outputs snapshot. Self-calls made
        before the checkpoint and never logged are queued now; each destination's
        outbox is made again (and its link asked for)."""
        self.group.next_seq = next_seq
        self.group.inputs = dict(inputs)
        for dest, out in outputs.items():
            if dest == self.name:
                for seq, body in self.self_calls.restore(out, self.logged(self.name)):
                    self.group.pending.append((self.name, seq, body))
            else:
                self.outbox(dest, int(out["next"]),
                            [(int(s), bytes(b)) for s, b in out["unacked"]])
