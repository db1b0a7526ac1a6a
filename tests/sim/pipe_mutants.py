"""Mutations of the pipeline's commit path that ``pipe_world`` must find: each is a wrong
version of one function of the real code (the sink's store, the coordinator's state, its
side of the sink connection), patched in for a run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ambrosia_services.connectors.clients.sinkport import Vote
from ambrosia_services.connectors.clients.sinkstore import FileSinkStore
from ambrosia_services.connectors.coordinator.core import ConnectorCore
from ambrosia_services.connectors.coordinator.records import FROM_START, Applied, Incoming
from ambrosia_services.connectors.coordinator.sink_session import (
    Action,
    ReportVote,
    SinkSession,
)
from ambrosia_services.connectors.twopc import Phase2

__all__ = ["PIPE_MUTANTS"]

_PREPARE = FileSinkStore.prepare
_RECEIVE = ConnectorCore.receive
_STEP = SinkSession.step


async def _prepare_unsynced(self: FileSinkStore, txn_id: str,
                            ranges: Sequence[tuple[int, int, int]]) -> Vote:
    """A yes vote before the pending bytes are synced: only the PREPARE record is."""
    pending, self._pending = self._pending, None
    try:
        return await _PREPARE(self, txn_id, ranges)
    finally:
        self._pending = pending


def _settle_as_aborted(self: ConnectorCore, sink: str, rtag: int, txn_ids: Sequence[str],
                       now_ns: int) -> None:
    """A new link's listing settled without the decisions: every transaction the sink
    holds is aborted, also one this coordinator decided to commit before it crashed."""
    rec = self.sinks.get(sink)
    if rec is None:
        return
    if rec.txn_id and rec.txn_id not in rec.decided and rec.txn_id in txn_ids:
        self._decide(rec, rec.txn_id, False)
    rec.settlement = [(t, False) for t in txn_ids]
    rec.settled_rtag = rtag
    self._cut_due(sink, rec, now_ns, force=True)


def _receive_again(self: ConnectorCore, batch: Iterable[Incoming]
                   ) -> list[tuple[int, list[Applied]]]:
    """A batch sent again (after the coordinator's crash) is applied again: the point of
    reference is moved but never looked at."""
    for stream_id, *_ in batch:
        rec = self.streams.get(stream_id)
        if rec is not None:
            rec.por = FROM_START  # nothing is a duplicate
    return _RECEIVE(self, batch)


def _stale_vote_taken(self: ConnectorCore, sink: str, txn_id: str, commit: bool,
                      now_ns: int) -> None:
    """A vote taken whatever transaction it names: a vote delivered again after its
    transaction was decided decides the one in flight."""
    rec = self.sinks.get(sink)
    if rec is None or not rec.txn_id:
        return
    self._decide(rec, txn_id, commit)
    self._cut_due(sink, rec, now_ns, force=not commit)


def _phase2_on_vote(self: SinkSession, rec: Any) -> list[Action]:
    """Phase2 commit sent on the sink's yes vote, before the decision is logged."""
    out = _STEP(self, rec)
    for action in list(out):
        if isinstance(action, ReportVote) and action.commit:
            out.append(self._write(Phase2(action.txn_id, True)))
    return out


PIPE_MUTANTS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "a sink votes yes before its bytes are synced": (FileSinkStore, "prepare",
                                                     _prepare_unsynced),
    "a listed transaction is settled as aborted whatever was decided": (
        ConnectorCore, "sink_uncommitted", _settle_as_aborted),
    "a batch sent again is applied again": (ConnectorCore, "receive", _receive_again),
    "Phase2 goes out on the vote, before the decision is logged": (SinkSession, "step",
                                                                    _phase2_on_vote),
    "a vote delivered again decides the transaction in flight": (
        ConnectorCore, "sink_voted", _stale_vote_taken),
}
