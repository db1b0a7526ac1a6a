"""Mutations of the word count pipeline that only ``pipejobs_world`` can find: each is a
wrong version of one function of the real code, patched in for a run. Each needs the
whole pipeline: jobs finishing out of order on runners, staged segments collected while
a batch's output is not yet committed everywhere, a coordinator crashing between a
batch's result and its commit, the primary's own reconciliation of a lost start (the job
world asks ``linkplan.lost_decision`` itself; here the real ``JobsLive`` does)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ambrosia_services.jobs.attempts import Reconciled
from ambrosia_services.pipeline import live as live_module
from ambrosia_services.pipeline.wordcount import WordCountPipeline
from ambrosia_services.staging import Ref

__all__ = ["PIPEJOBS_MUTANTS"]

_EMIT_READY = WordCountPipeline._emit_ready
_CHECKPOINT_STATE = WordCountPipeline.checkpoint_state
_LOST_DECISION = live_module.lost_decision


def _emit_as_done(self: WordCountPipeline) -> None:
    """A batch's output goes to the sinks as soon as its job's result is in, whether or
    not the batches before it have gone."""
    for k in sorted(self.results):
        data = self.results.pop(k)
        _key, _lines, refs = self.batches.pop(k)
        self.emitted = max(self.emitted, k)
        ends = {}
        for sink in self.core.settings["sinks"]:
            self.emit(sink, data)
            rec = self.core.sinks[sink]
            ends[sink] = rec.committed + len(rec.pending)
        self.uncommitted.append([k, ends, refs])
    self.on_committed()


def _release_at_emit(self: WordCountPipeline) -> None:
    """A batch's staged blocks let go as its output is emitted (and again once it is
    committed everywhere): a segment still holding a later batch's lines may go."""
    before = {k for k, *_ in self.uncommitted}
    _EMIT_READY(self)
    for k, _ends, refs in self.uncommitted:
        if k not in before:
            self.release([Ref.from_list(r) for r in refs])


def _uncommitted_not_kept(self: WordCountPipeline) -> Any:
    """A checkpoint forgets the batches emitted but not yet committed everywhere: after a
    crash between a batch's result and its commit, its blocks are never released."""
    state = _CHECKPOINT_STATE(self)
    state["wordcount"]["uncommitted"] = []
    return state


def _committed_is_nothing(verdict: Reconciled, partial: bool) -> tuple[bool, str]:
    """The primary reads a lost start's committed output as nothing done: a new attempt
    of a job whose output is committed."""
    if verdict is Reconciled.COMMITTED:
        return False, verdict.value
    return _LOST_DECISION(verdict, partial)


PIPEJOBS_MUTANTS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "a batch's output goes out as its job finishes, out of batch order": (
        WordCountPipeline, "_emit_ready", _emit_as_done),
    "a batch's staged blocks are released at its emit as well as at its commit": (
        WordCountPipeline, "_emit_ready", _release_at_emit),
    "a checkpoint forgets the batches not yet committed everywhere": (
        WordCountPipeline, "checkpoint_state", _uncommitted_not_kept),
    "the primary's reconciliation relaunches a job whose output is committed": (
        live_module, "lost_decision", _committed_is_nothing),
}
