"""Mutations of the coordinator's rules that the simulation must find: each is a wrong
version of one function of the real code, patched in for a run."""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ambrosia_ic import logstore, recovery
from ambrosia_ic.coordinator import commit_plan, inbound, start_plan
from ambrosia_ic.coordinator import sink as sinks
from ambrosia_ic.coordinator.ack_batch import AckBatch
from ambrosia_ic.coordinator.commit_plan import Links, Move
from ambrosia_ic.coordinator.group_commit import GroupCommit, TakenRecord
from ambrosia_ic.coordinator.inbound import InboundAction, InboundLink
from ambrosia_ic.coordinator.intake import LinkIntake
from ambrosia_ic.coordinator.self_calls import SelfCalls
from ambrosia_ic.coordinator.sink import FencedSink, StandaloneSink
from ambrosia_ic.coordinator.start_plan import StartPlan, UpgradePlan
from ambrosia_ic.errors import LockLostError
from ambrosia_ic.links import LinkOutbox, handshake
from ambrosia_ic.logstore import log_path, raft_rules
from ambrosia_ic.logstore import records as log_records
from ambrosia_ic.logstore.raft_tenure import CatchUp, Propose, RaftStep, RaftTenure, Renewed
from ambrosia_ic.logstore.records import LogScan
from ambrosia_ic.registry import instances as registrations
from ambrosia_ic.replication import checkpointer, takeover
from ambrosia_ic.replication import upgrade_steps as up

from ambrosia_core.errors import UnexpectedMessageError

__all__ = ["MUTANTS", "RAFT_MUTANTS"]


def _take_whole(self: LinkIntake, sender: str, seq_id: int, calls: int,
                body: bytes) -> bytes | None:
    """The overlap skip dropped: a resent record partly taken before is queued whole."""
    taken = self.position(sender)
    if seq_id <= taken:
        return None
    if seq_id - calls + 1 > taken + 1:
        raise UnexpectedMessageError("a gap")
    self._taken[sender] = seq_id
    return body


def _write_unsynced(self: StandaloneSink, writer: Any, data: bytes) -> None:
    """The sync before delivery dropped: the record is written, never synced."""
    writer.write(data)


def _write_fenced_off(self: FencedSink, writer: Any, data: bytes) -> Iterator[str]:
    """A fence ignored: an active/active primary writes without looking for a newer
    epoch (a paused primary resuming after a takeover writes on)."""
    yield "checked"
    writer.write(data)
    writer.sync()
    yield "landed"


def _write_looking_once(self: FencedSink, writer: Any, data: bytes) -> Iterator[str]:
    """No look after the write: a record that landed after a newer claim is delivered
    by the primary that wrote it."""
    self.epochs.check()
    yield "checked"
    writer.write(data)
    writer.sync()
    yield "landed"


_group_take = GroupCommit.take


def _take_acknowledging(self: GroupCommit, max_bytes: int, epoch: int | None = None) -> TakenRecord:
    """Acknowledged before the log write: the positions a record makes durable (what
    senders are told, at a handshake or in a TrimTo) move as it is taken."""
    record = _group_take(self, max_bytes, epoch)
    self.inputs = record.inputs
    return record


def _restore_forgetting(self: SelfCalls, saved: dict[str, Any],
                        logged: int) -> list[tuple[int, bytes]]:
    """A recovery forgets the self-calls a checkpoint holds that the log does not."""
    self.next = int(saved["next"])
    return []


def _ack_one_ahead(self: AckBatch, positions: Mapping[str, int]) -> None:
    """The link server acknowledges one call past what is logged: its sender forgets a
    call the receiver may still lose in a crash."""
    _ack_add(self, {sender: seq + 1 for sender, seq in positions.items()})


def _reply_one_ahead(secret: bytes, hello: Any, nonce_s: bytes, last_logged: int) -> bytes:
    """The handshake's reply names one call past the last logged: the sender resumes
    after a call the receiver never logged."""
    return _hello_reply(secret, hello, nonce_s, last_logged + 1)


_hello_reply = handshake.hello_reply  # the inbound link's rules call it by this name
_inbound_take = InboundLink._take


def _take_whole_reads(self: InboundLink, sender: str, data: bytes) -> list[InboundAction]:
    """A read that ends inside a record hands on none of the records it completed."""
    actions = _inbound_take(self, sender, data)
    return [] if self._records.partial else actions
_ack_add = AckBatch.add
_outbox_trim = LinkOutbox.trim


def _trim_one_more(self: LinkOutbox, upto: int) -> None:
    """A sender forgets the call after the position acknowledged."""
    _outbox_trim(self, upto + 1)


# The recovery reader: what the simulation's standalone instances start from.
_plan_from = recovery._plan_from


def _plan_one_late(d: Any, committer_id: int, n: int, cf: Any) -> Any:
    """A recovery starts one record late: the first record after the checkpoint is not
    replayed."""
    plan = _plan_from(d, committer_id, n, cf)
    for k in plan.logs:
        if len(plan.offsets[k]):
            del plan.offsets[k][0]
            plan.start_seq += 1
            break
    return plan


def _plan_one_behind(d: Any, committer_id: int, n: int, cf: Any) -> Any:
    """A watermark read one behind: the recovered position of every sender is one call
    short of what the log holds."""
    plan = _plan_from(d, committer_id, n, cf)
    plan.inputs = {k: v - 1 for k, v in plan.inputs.items()}
    return plan


_state = recovery.coordinator_state


def _state_one_ahead(next_seq: int, inputs: dict[str, int],
                     outputs: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's log position off by one."""
    return _state(next_seq + 1, inputs, outputs)


def _torn_as_damage(self: LogScan, offset: int, reason: str) -> None:
    """A write cut short taken for damage: a crash inside a write stops the instance."""
    raise self._damage(offset, f"an incomplete record: {reason}")


def _damage_as_torn(self: LogScan, buf: Any, pos: int, seq: int, written: int,
                    reason: str) -> None:
    """Damage taken for a torn tail: a record whose length was flipped is cut off with
    every record after it."""
    self._torn(pos, reason)


def _chain_as_found(d: Any, n: int) -> list[int]:
    """A missing log taken for a shorter chain: the logs there are, from checkpoint
    ``n`` on (a log removed after the newest checkpoint rolls the instance back)."""
    return [k for k in logstore.file_numbers(d, logstore.LOG_PREFIX) if k >= n]


def _temps_kept(d: Any, first: int = 1, through: int | None = None) -> list[Any]:
    """What a checkpoint write cut short left is never removed."""
    return []


def _checked_always(buf: Any, pos: int, body_end: int, end: int) -> bool:
    """A record's own check bytes not looked at: a flipped watermark is read as valid."""
    return True


def _move_never_switching(pending: int, switch_wanted: bool) -> Move:
    """The committer ignores a wanted log switch: it only takes records."""
    return Move.TAKE if pending else Move.IDLE


_links = commit_plan.links


def _links_never_resumed(full: bool, pending: int, draining: bool,
                         limit: int = commit_plan.MAX_PENDING) -> Links:
    """Back-pressure that never resumes: links paused once stay paused."""
    todo = _links(full, pending, draining, limit)
    return Links.HOLD if todo is Links.RESUME else todo


def _links_never_paused(full: bool, pending: int, draining: bool,
                        limit: int = commit_plan.MAX_PENDING) -> Links:
    """Back-pressure that never pauses: links are read however far the log is behind."""
    return Links.RESUME


def _checkpoint_once_next_exists(done: bool, checkpoint_exists: bool,
                                 next_log_exists: bool) -> checkpointer.Move:
    """A checkpointing secondary checkpoints as soon as the next log exists, before it
    has read its log whole: checkpoint N+1 misses the last records of log N."""
    if next_log_exists and not checkpoint_exists:
        return checkpointer.Move.CHECKPOINT
    return checkpointer.Move.NEXT if done else checkpointer.Move.READ


_choose_upgrade = start_plan.choose_upgrade


def _upgrade_done_again(old_dir: Any, new_dir: Any, cid: int, to: int,
                        **kw: Any) -> UpgradePlan:
    """A finished upgrade is done again: a start that missed only the registration's
    update recovers the old version and upgrades it once more."""
    chosen = _choose_upgrade(old_dir, new_dir, cid, to, **kw)
    return UpgradePlan("retry", to) if chosen.kind == "finished" else chosen


def _upgrade_afresh_regardless(old_dir: Any, new_dir: Any, cid: int, to: int,
                               **kw: Any) -> UpgradePlan:
    """An instance that went live, its old log gone, is upgraded as if it never started."""
    return _choose_upgrade(old_dir, new_dir, cid, to, **{**kw, "started": False})


def _upgrade_temps_kept(old_dir: Any, new_dir: Any, cid: int, to: int,
                       **kw: Any) -> UpgradePlan:
    """What a killed upgrade's checkpoint write left in the new directory stays there
    after the retry."""
    chosen = _choose_upgrade(old_dir, new_dir, cid, to, **kw)
    return UpgradePlan(chosen.kind, to, tuple(p for p in chosen.remove
                                              if not p.name.endswith(".tmp")))


_choose_start = start_plan.choose_start


def _start_afresh_regardless(d: Any, cid: int, **kw: Any) -> StartPlan:
    """A log gone (its directory entry lost, say) taken for a first start."""
    return _choose_start(d, cid, **{**kw, "started": False})


def _next_log_unsynced(self: StandaloneSink, d: Any, n: int, old: Any = None) -> Any:
    """A new log's directory entry is not synced: records written to it (and delivered)
    go with the entry at a crash."""
    if old is not None:
        old.trim()
    return self.open_log(log_path(d, n))


def _registration_unchecked(data: dict[str, object]) -> str:
    """A registration's check bytes say nothing: a flipped bit is read as valid."""
    return "0"


def _seal_unfollowed() -> Generator[takeover.TakeoverStep, Any, int]:
    """A takeover seals the old primary's log and goes on without delivering what is
    in it up to the seal."""
    n = yield takeover.NewestLog()
    end = yield takeover.ReadSeal(n)
    if end is None:
        end = yield takeover.WholeEnd(n)
        yield takeover.WriteSeal(n, end)
    return int(n) + 1


def _standby_unchecked(following: bool, running: int) -> Generator[up.UpgradeStep, Any, None]:
    """A standby takes over without reading the registration: after an upgrader died
    between its commit and its mark, the old version has a second primary."""
    yield from takeover.take_over(following)


def _upgrade_steps(running: int, to: int, *, clear: bool = True,
                   commit_first: bool = False) -> Generator[up.UpgradeStep, Any, None]:
    """``upgrade_replica`` with a step left out or moved."""
    n = yield from takeover.seal_and_finish()
    yield up.TakeUpgradeCheckpoint(n)
    yield up.CheckOldEpoch()
    if not (yield up.ClaimNewEpoch()):
        raise LockLostError(f"another replica is writing version {to}")
    up.check_version((yield up.ReadRegistration()), running, "upgrader")
    if clear:
        yield up.RemoveUncommitted()
    yield up.OpenNewLog(n)
    if commit_first:
        yield up.CheckEpochs()
        yield up.Commit(to)
    yield up.SaveNewCheckpoint(n)
    if not commit_first:
        yield up.CheckEpochs()
        yield up.Commit(to)
    yield up.MarkUpgraded(to)
    yield up.GoLiveUpgraded(n)


def _upgrade_uncleared(running: int, to: int) -> Generator[up.UpgradeStep, Any, None]:
    """What a killed attempt left in the new version's directory stays there."""
    return _upgrade_steps(running, to, clear=False)


def _upgrade_committed_early(running: int, to: int) -> Generator[up.UpgradeStep, Any, None]:
    """The registration names the new version before its checkpoint is written."""
    return _upgrade_steps(running, to, commit_first=True)


def _remove_through_oldest(d: Path, keep: int, prefixes: Sequence[str],
                           ignore: Collection[int] = ()) -> int | None:
    """Pruning takes checkpoint N for the state at the end of log N: the log paired
    with the oldest kept checkpoint goes with the older ones."""
    counted = [k for k in logstore.file_numbers(d, logstore.CHECKPOINT_PREFIX)
               if k not in ignore]
    if not counted:
        return None
    oldest = counted[-max(1, keep):][0]
    for prefix in prefixes:
        for k in logstore.file_numbers(d, prefix):
            if k < oldest or (prefix == logstore.LOG_PREFIX and k == oldest < counted[-1]):
                (d / f"{prefix}{k}").unlink(missing_ok=True)
    return oldest


def _remove_counting_damaged(d: Path, keep: int, prefixes: Sequence[str],
                             ignore: Collection[int] = ()) -> int | None:
    """A checkpoint known to be damaged counts as kept when pruning: an intact older
    one it passed over for is removed with its logs."""
    return logstore.remove_unkept(d, keep, prefixes)


MUTANTS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "a resent record's overlap is queued again": (LinkIntake, "take", _take_whole),
    "a record is delivered before it is synced": (StandaloneSink, "write", _write_unsynced),
    "calls are acknowledged before their record is written": (GroupCommit, "take",
                                                             _take_acknowledging),
    "a recovery forgets the checkpoint's unlogged self-calls": (SelfCalls, "restore",
                                                                _restore_forgetting),
    "a sender forgets one call too many": (LinkOutbox, "trim", _trim_one_more),
    "the link server acknowledges one call ahead": (AckBatch, "add", _ack_one_ahead),
    "a link handshake names one call past the last logged": (inbound, "hello_reply",
                                                             _reply_one_ahead),
    "a link read ending inside a record hands on nothing": (InboundLink, "_take",
                                                             _take_whole_reads),
    "a fenced primary writes on": (FencedSink, "write_steps", _write_fenced_off),
    "a takeover goes live without the old primary's last records": (
        takeover, "seal_and_finish", _seal_unfollowed),
    "a fenced primary delivers what landed after the claim": (FencedSink, "write_steps",
                                                              _write_looking_once),
    "a recovery starts one record late": (recovery, "_plan_from", _plan_one_late),
    "a recovery reads the watermarks one behind": (recovery, "_plan_from", _plan_one_behind),
    "a checkpoint's log position is one ahead": (recovery, "coordinator_state",
                                                 _state_one_ahead),
    "a write cut short is taken for damage": (LogScan, "_torn", _torn_as_damage),
    "damage is taken for a torn tail": (LogScan, "_torn_unless_followed", _damage_as_torn),
    "a record's own check bytes are not looked at": (log_records, "_checked",
                                                     _checked_always),
    "a missing log is taken for a shorter chain": (recovery, "check_log_chain",
                                                   _chain_as_found),
    "a checkpoint's temporary file outlives a start": (logstore, "remove_checkpoint_temps",
                                                       _temps_kept),
    "the committer ignores a wanted log switch": (commit_plan, "next_move",
                                                  _move_never_switching),
    "back-pressure never resumes the links": (commit_plan, "links", _links_never_resumed),
    "back-pressure never pauses the links": (commit_plan, "links", _links_never_paused),
    "a checkpointing secondary's checkpoint is records short of its log": (
        checkpointer, "next_move", _checkpoint_once_next_exists),
    "a finished upgrade is done again": (start_plan, "choose_upgrade", _upgrade_done_again),
    "an instance that went live is upgraded afresh": (start_plan, "choose_upgrade",
                                                      _upgrade_afresh_regardless),
    "a killed upgrade's temporary checkpoint is left": (start_plan, "choose_upgrade",
                                                        _upgrade_temps_kept),
    "a log gone is taken for a first start": (start_plan, "choose_start",
                                              _start_afresh_regardless),
    "a new log's directory entry is not synced": (StandaloneSink, "next_log",
                                                  _next_log_unsynced),
    "a registration's check bytes are not looked at": (registrations, "_check_of",
                                                       _registration_unchecked),
    "pruning removes the log paired with the oldest kept checkpoint": (
        sinks, "remove_unkept", _remove_through_oldest),
    "a damaged checkpoint counts as kept when pruning": (sinks, "remove_unkept",
                                                         _remove_counting_damaged),
    "an old standby takes over without reading the registration": (
        up, "standby_takes_over", _standby_unchecked),
    "a replica set's upgrade keeps what a killed attempt left": (
        up, "upgrade_replica", _upgrade_uncleared),
    "a replica set's upgrade commits before its checkpoint is written": (
        up, "upgrade_replica", _upgrade_committed_early),
}


def _never_look(now: float, fresh: float, lease: float) -> bool:
    """A Raft primary sends without renewing however long it was paused."""
    return False


def _claim_early(silent: float, lease: float, *, ended: bool = False) -> bool:
    """A standby claims before the primary's lease ran out."""
    return silent > lease / 4 or ended


def _superseded_only_unclaimed(held: int | None, epoch: int) -> bool:
    """A superseded epoch taken as current: only a store that never claimed is fenced."""
    return held is None


def _append_unread(self: RaftTenure, encode: Callable[[int], bytes]
                   ) -> Generator[RaftStep, Any, int]:
    """An append counts once sent: the primary does not look whether a newer claim
    landed before its entry."""
    self.check()
    while raft_rules.must_look(self.now(), self.counted_sent_at, self.lease):
        held = self.held
        yield CatchUp()
        self.check()
        if not (yield from self.claim(self.holder, after=held)):
            self.check()
            raise LockLostError("not renewed")
        assert self.held is not None
        yield Renewed(self.held)
    assert self.held is not None
    sent = self.now()
    _, index = yield Propose(encode(self.held))
    self.counted_sent_at = sent
    return int(index)


# Mutants of the Raft store's rules, found by ``raftlog`` runs.
RAFT_MUTANTS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "a Raft append skips the look after a long pause": (raft_rules, "must_look", _never_look),
    "a Raft standby claims before the lease ran out": (raft_rules, "may_claim", _claim_early),
    "a superseded Raft epoch is taken as current": (raft_rules, "superseded",
                                                    _superseded_only_unclaimed),
    "a Raft append counts before it is read back": (RaftTenure, "append", _append_unread),
}
