"""Mutations of a Raft replica's roles (``replication.raft_roles``) that the runs of
``raftstore`` must find: each a wrong version of one method, patched in for a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ambrosia_ic.replication import raft_roles as roles
from ambrosia_ic.replication.raft_roles import RaftRoles

__all__ = ["RAFT_STORE_MUTANTS"]


def _live_before_reading(self: RaftRoles, looked: roles.Looked) -> roles.Steps:
    """The takeover opens the next log and goes live before it reads the log up to its
    claim (a live primary's reads deliver nothing: its own records are the committer's)."""
    claimed = yield roles.Look()
    if claimed.record_count == 0:
        yield roles.FirstStart()
        return
    yield roles.TakingOver(roles.gone(looked, self.lease))
    yield roles.OpenLog()
    yield roles.GoLive()


def _follow_skipping(self: RaftRoles, looked: roles.Looked) -> roles.Steps:
    """Following passes over the record due and delivers the next, whose sequence id
    skips one, with no look for a gap."""
    recs = list(looked.records)
    if self.next_seq is None:
        self.backlog += recs
        if looked.newest is None or looked.record_count == 0:
            return
        self.next_seq = self.loaded = yield roles.LoadCheckpoint(looked.newest)
        recs, self.backlog = self.backlog, []
    assert self.next_seq is not None
    out = [r for r in recs if r.seq_id > self.next_seq]
    if out:
        yield roles.Deliver(tuple(out))
        self.next_seq = out[-1].seq_id + 1


def _checkpoint_one_past(self: RaftRoles) -> roles.Steps:
    """The checkpointing secondary numbers its checkpoint one past the records its state
    holds."""
    assert self.next_seq is not None
    yield roles.Checkpoint(self.next_seq + 1)
    self.loaded = self.next_seq


RAFT_STORE_MUTANTS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "a Raft takeover goes live before it reads the log up to its claim": (
        RaftRoles, "take_over", _live_before_reading),
    "a Raft standby delivers a record whose sequence id skips one": (
        RaftRoles, "follow", _follow_skipping),
    "a Raft checkpoint is numbered one past its records": (
        RaftRoles, "checkpoint", _checkpoint_one_past),
}
