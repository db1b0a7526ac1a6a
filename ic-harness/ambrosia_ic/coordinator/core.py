"""What a coordinator decides for its instance, without I/O: a sans-IO machine.

Events come in as method calls:

- ``receive_binding``: bytes read from the binding (its outputs are routed, its other
  messages checked and acted on; malformed bytes or a message out of turn raise);
- ``link_record``: a record from a linked sender (the new calls are queued once);
- ``take`` and ``durable``: the next log record is taken, then made durable by the shell;
- ``begin_first_start``, ``first_record``, ``begin_recovery``, ``restore``,
  ``become_primary``, ``set_phase``: the steps of the start-up flows;
- ``switch_log``, ``checkpoint_saved``, ``ask_checkpoint``: the log's switches and the
  checkpoints asked of the binding;
- ``followed``, ``caught_up``: records a follower delivers, which another replica wrote.

What the shell must do comes out as data: the typed ``actions`` (``core_actions``) it
runs in order after each event (open a link for a new destination, wake the committer, hand over a
checkpoint the binding streamed back or the InitialMessage, log a line), and the byte
streams it pulls: the next record to write (``take``), what a durable record lets go
(``Durable``: bytes to deliver, positions to acknowledge), and each destination's
``LinkOutbox`` (what to write on its link).

The rules themselves are the small sans-IO pieces beside this module, each checked on
its own: ``group_commit``, ``intake``, ``self_calls``, ``checkpoint_plan``, ``phase``,
and ``links.outbox.LinkOutbox``; ``binding_stream`` cuts the binding's bytes into what
is routed. The replay digest is a port (``Digests``): the shell's writes files, a
simulation's keeps nothing.
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
    check_bytes,
    encode_control_record,
)

from ..links.outbox import LinkOutbox
from ..logstore import is_impulse
from .binding_stream import BindingStream, CheckpointStream
from .checkpoint_plan import CheckpointPlan, Event
from .core_actions import (
    Action,
    CheckpointData,
    CheckpointReceived,
    Digest,
    Digests,
    InitialReceived,
    LogLine,
    OpenLink,
)
from .frames import LinkRecord, OutgoingFrame
from .group_commit import Durable, GroupCommit, PendingInput, TakenRecord
from .intake import LinkIntake
from .phase import Phase, next_phase
from .self_calls import SelfCalls

# The actions and the digest port are importable from here, where the core is.
__all__ = ["Action", "CheckpointData", "CheckpointReceived", "CoordinatorCore", "Digest",
           "Digests", "InitialReceived", "LogLine", "OpenLink"]


class CoordinatorCore:
    """The decisions of one instance's coordinator.

    Args:
        name: the instance's name.
        cid: the committer id stamped into every record.
        trigger_bytes: a log this large is switched (and, standalone, checkpointed).
        keeps_early_impulses: Impulses the binding sends before the coordinator is live
            are kept (a replica's sink), not dropped.
        digests: where the replay digest goes (None: nowhere).
    """

    def __init__(self, name: str, cid: int, *, trigger_bytes: int = 1 << 62,
                 keeps_early_impulses: bool = False, digests: Digests | None = None) -> None:
        self.name = name
        self.who = name  # how errors name this coordinator
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
        self.wake = False  # the committer has inputs to commit (set once live)
        self._checkpoint = CheckpointStream()
        self._stream = BindingStream(self.route_frames, self.on_message)

    # ------------------------------------------------------------------ state
    def logged(self, sender: str) -> int:
        """The last call from ``sender`` the log holds (0: none)."""
        return self.group.inputs.get(sender, 0)

    def set_phase(self, new: Phase) -> None:
        self.phase = next_phase(self.who, self.phase, new)

    def take_actions(self) -> list[Action]:
        actions, self.actions = self.actions, []
        return actions

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
                self.wake = True
        elif t is InitialMessage:
            if not self.awaiting_initial:
                raise UnexpectedMessageError("an InitialMessage outside a first start")
            self.awaiting_initial = False
            self.actions.append(InitialReceived(ev))
        else:
            raise UnexpectedMessageError(f"{t.__name__} from a binding")

    # ------------------------------------------------------------------ routing
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
        if self.phase is Phase.LIVE:
            self.wake = True

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

    def durable(self, record: TakenRecord, log_size: int) -> Durable:
        """``record`` is durable (the log now holds ``log_size`` bytes): what it lets go
        to the binding and the senders."""
        out = self.group.durable(record, self.name)
        self.last_delivered = record.seq_id
        self.self_calls.trim(self.logged(self.name))
        if log_size >= self.trigger_bytes:
            self.ckpt.on(Event.SIZE_REACHED)
        return out

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
    def begin_first_start(self) -> bytes:
        """A first start: returns the bytes that ask the binding for checkpoint 1 as it
        becomes primary. It answers with its InitialMessage (``InitialReceived``), then
        the checkpoint (``CheckpointReceived``); the shell saves that, opens log 1, and
        commits record 0 (``first_record``) before going live."""
        self.set_phase(Phase.FIRST_START)
        self.awaiting_initial = True
        return self.ask_checkpoint(1, TakeBecomingPrimaryCheckpoint())

    def begin_recovery(self, start_seq: int, next_seq: int, inputs: dict[str, int],
                       outputs: dict[str, dict[str, Any]]) -> None:
        """A recovery from a checkpoint whose interval starts at record ``start_seq``
        and a log that holds records up to ``next_seq - 1`` (``inputs``: the positions
        after them). The shell delivers the checkpoint and those records, then asks for
        the checkpoint that makes the binding primary."""
        self.set_phase(Phase.RECOVERING)
        self.restore(next_seq, inputs, outputs)
        self.last_delivered = start_seq - 1

    # ------------------------------------------------------------------ checkpoints
    def switch_log(self, n: int, checkpoint: bool
                   ) -> tuple[tuple[int, dict[str, int]], bytes] | None:
        """The committer moves to log ``n`` between two records. With ``checkpoint``
        (a standalone coordinator), returns the log's position at the switch (what the
        checkpoint is saved with) and the bytes that ask the binding for checkpoint
        ``n``; call ``checkpoint_saved`` once it is durable."""
        if not checkpoint:
            self.ckpt.on(Event.SWITCHED_ONLY)
            return None
        self.ckpt.on(Event.SWITCHED)
        position = (self.group.next_seq, dict(self.group.inputs))
        return position, self.ask_checkpoint(n, TakeCheckpoint())

    def checkpoint_saved(self) -> None:
        """The checkpoint of the last switch is durable (one asked for meanwhile is
        taken next)."""
        if self.ckpt.on(Event.SAVED) and self.phase is Phase.LIVE:
            self.wake = True

    def ask_checkpoint(self, n: int, request: Message) -> bytes:
        """Checkpoint ``n`` is asked for with ``request``; returns the bytes to deliver.
        The binding answers with a Checkpoint message, chunks and the end of the stream
        (``CheckpointReceived``)."""
        self._checkpoint.ask(n)
        if isinstance(request, (TakeBecomingPrimaryCheckpoint, UpgradeTakeCheckpoint)):
            self.binding_primary = True  # it is primary once it has sent this checkpoint
        return encode_control_record(self.cid, request)

    def become_primary(self) -> bytes:
        """The bytes that tell a binding that finished its replay it is primary."""
        self.binding_primary = True
        return encode_control_record(self.cid, BecomingPrimary())

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
