"""Mutations of the coordinator's rules that the simulation must find: each is a wrong
version of one function of the real code, patched in for a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ambrosia_ic.coordinator.group_commit import GroupCommit, Record
from ambrosia_ic.coordinator.intake import LinkIntake
from ambrosia_ic.coordinator.self_calls import SelfCalls
from ambrosia_ic.coordinator.sink import FencedSink, StandaloneSink
from ambrosia_ic.links import LinkOutbox

from ambrosia_core.errors import UnexpectedMessageError

__all__ = ["MUTANTS"]


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


def _write_fenced_off(self: FencedSink, writer: Any, data: bytes) -> None:
    """A fence ignored: an active/active primary writes without looking for a newer
    epoch (a paused primary resuming after a takeover writes on)."""
    writer.write(data)
    writer.sync()


_group_take = GroupCommit.take


def _take_acknowledging(self: GroupCommit, max_bytes: int, epoch: int | None = None) -> Record:
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


_outbox_trim = LinkOutbox.trim


def _trim_one_more(self: LinkOutbox, upto: int) -> None:
    """A sender forgets the call after the position acknowledged."""
    _outbox_trim(self, upto + 1)


MUTANTS: dict[str, tuple[type, str, Callable[..., Any]]] = {
    "a resent record's overlap is queued again": (LinkIntake, "take", _take_whole),
    "a record is delivered before it is synced": (StandaloneSink, "write", _write_unsynced),
    "calls are acknowledged before their record is written": (GroupCommit, "take",
                                                             _take_acknowledging),
    "a recovery forgets the checkpoint's unlogged self-calls": (SelfCalls, "restore",
                                                                _restore_forgetting),
    "a sender forgets one call too many": (LinkOutbox, "trim", _trim_one_more),
    "a fenced primary writes on": (FencedSink, "write", _write_fenced_off),
}
