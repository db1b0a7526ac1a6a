"""The recovery reader: which checkpoint to start from, which logs follow it, and the
coordinator state they add up to. Reads only; the live coordinator, ``debug-instance``
and ``log dump`` share it (and so will an active/active standby following the log).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from ambrosia_core.errors import CoordinatorError
from ambrosia_ic.errors import LogCorruptionError, MissingLogError

from .logstore import (
    CHECKPOINT_PREFIX,
    LOG_PREFIX,
    CheckpointFile,
    DiskRecord,
    LogScan,
    checkpoint_path,
    file_numbers,
    log_path,
    read_seal,
    wire_batches,
    written_end,
)

__all__ = ["RecoveryPlan", "ReplayEstimate", "check_log_chain", "check_no_orphan_logs",
           "coordinator_state", "estimate_replay",
           "first_start_pending", "interrupted_first_start", "newest_intact_checkpoint",
           "plan_recovery", "read_state", "replay_records",
           "replay_wire"]

STATE_FORMAT = 1


@attrs.define
class RecoveryPlan:
    """What a recovery from checkpoint ``checkpoint`` will replay.

    ``next_seq`` and ``inputs`` are the state after the last whole record; ``torn`` is
    ``(path, offset)`` of a torn tail in the newest log, if any (``torn_zeros``: nothing
    but the zeros a live log ends in, not a torn record); ``offsets`` holds, per
    log, where each of its whole records starts (8 bytes a record), so the replay need
    not parse the logs a second time.
    """

    directory: Path
    committer_id: int
    checkpoint: CheckpointFile
    number: int
    logs: list[int]
    start_seq: int
    next_seq: int
    inputs: dict[str, int]
    outputs: dict[str, dict[str, Any]]
    records: int = 0
    torn: tuple[Path, int] | None = None
    torn_zeros: bool = False
    offsets: dict[int, array[int]] = attrs.Factory(dict)
    # Newer checkpoints passed over because they are damaged (newest first).
    damaged: list[tuple[int, LogCorruptionError]] = attrs.Factory(list)

    @property
    def last_log(self) -> int:
        return self.logs[-1] if self.logs else self.number


def latest_checkpoint(d: Path) -> int | None:
    nums = file_numbers(d, CHECKPOINT_PREFIX)
    return nums[-1] if nums else None


def interrupted_first_start(d: Path, committer_id: int | None = None) -> bool:
    """Whether ``d`` holds only the leftovers of a first start that died before its
    InitialMessage was durably logged as record 0.

    A first start writes ``serverchkpt1``, then creates ``serverlog1``, then logs record
    0; checkpoint 1 is written by nothing else. Until record 0 is whole on disk the
    instance has done nothing that counts, so the next start must be a first start
    again (or ``on_first_start`` would never run).

    Raises:
        LogCorruptionError: log 1 is damaged (not merely torn) before its first record.
    """
    if file_numbers(d, CHECKPOINT_PREFIX) != [1]:
        return False
    logs = file_numbers(d, LOG_PREFIX)
    if not logs:
        return True
    if logs != [1]:
        return False
    scan = LogScan(log_path(d, 1), allow_torn_tail=True, first_seq=0,
                   committer_id=committer_id, limit=read_seal(d, 1))
    return next(iter(scan), None) is None


def check_no_orphan_logs(d: Path) -> None:
    """Refuse a directory whose logs lost their checkpoint: starting afresh there would
    run the first start again over a history that happened.

    Raises:
        CoordinatorError: a log exists but no checkpoint.
    """
    logs = file_numbers(d, LOG_PREFIX)
    if logs and latest_checkpoint(d) is None:
        raise CoordinatorError(
            f"{d}: {LOG_PREFIX}{logs[0]} exists but no checkpoint, so its records cannot be "
            "recovered; restore the checkpoint, or move the directory away to start afresh"
        )


def first_start_pending(d: Path, committer_id: int | None = None) -> bool:
    """Whether the next start of directory ``d`` is a first start: no checkpoint, or
    only an interrupted first start's leftovers.

    Raises:
        CoordinatorError: logs without a checkpoint (see ``check_no_orphan_logs``).
        LogCorruptionError: see ``interrupted_first_start``.
    """
    if latest_checkpoint(d) is None:
        check_no_orphan_logs(d)
        return True
    return interrupted_first_start(d, committer_id)


def coordinator_state(next_seq: int, inputs: dict[str, int],
                      outputs: dict[str, Any]) -> dict[str, Any]:
    """The coordinator's part of a checkpoint: where the log stands when the binding's
    state was taken, and the outputs not yet acknowledged (``read_state`` reads it)."""
    return {"format": STATE_FORMAT, "next_seq": next_seq, "inputs": dict(inputs),
            "outputs": outputs}


def read_state(cf: CheckpointFile) -> tuple[int, dict[str, int], dict[str, dict[str, Any]]]:
    """``(next_seq, inputs, outputs)`` of a checkpoint's coordinator state.

    Raises:
        LogCorruptionError: the state is of an unknown format or misses fields.
    """
    s = cf.state
    bad = LogCorruptionError(str(cf.path), 12, "coordinator state is missing fields")
    if s.get("format") != STATE_FORMAT:
        raise LogCorruptionError(str(cf.path), 12, f"unknown state format {s.get('format')!r}")
    next_seq = s.get("next_seq")
    inputs = s.get("inputs")
    outputs = s.get("outputs")
    if not isinstance(next_seq, int) or not isinstance(inputs, dict):
        raise bad
    if not isinstance(outputs, dict):
        raise bad
    for k, v in inputs.items():
        if not isinstance(k, str) or not isinstance(v, int):
            raise bad
    for k, v in outputs.items():
        if not isinstance(k, str) or not isinstance(v, dict):
            raise bad
        if not isinstance(v.get("next"), int) or not isinstance(v.get("unacked"), list):
            raise bad
    return next_seq, dict(inputs), outputs


def plan_recovery(d: Path, committer_id: int, checkpoint: int | None = None) -> RecoveryPlan | None:
    """Scan checkpoint ``checkpoint`` and every log after it.

    By default the newest checkpoint is used; a damaged one is passed over for the
    newest older intact checkpoint whose logs are all kept (``plan.damaged`` lists
    those passed over). Returns None when there is no checkpoint at all.

    Raises:
        LogCorruptionError: a file is damaged anywhere but the newest log's torn tail;
            for damaged checkpoints, the newest one's damage when no older intact
            checkpoint can stand in.
        MissingLogError: a log the replay needs is gone (``check_log_chain``).
        CoordinatorError: a checkpoint is in the format before check bytes, or
            checkpoint ``checkpoint`` is not kept.
    """
    if checkpoint is not None:
        path = checkpoint_path(d, checkpoint)
        if not path.exists():
            kept = ", ".join(map(str, file_numbers(d, CHECKPOINT_PREFIX))) or "none"
            raise CoordinatorError(f"{path}: no such checkpoint (kept: {kept})")
        return _plan_from(d, committer_id, checkpoint, CheckpointFile(path))
    found = newest_intact_checkpoint(d)
    if found is None:
        return None
    n, cf, damaged = found
    plan = _plan_from(d, committer_id, n, cf)
    plan.damaged = damaged
    return plan


def newest_intact_checkpoint(
    d: Path,
) -> tuple[int, CheckpointFile, list[tuple[int, LogCorruptionError]]] | None:
    """``(number, file, damaged)``: the newest checkpoint whose check bytes and state
    are intact, passing over damaged newer ones (listed in ``damaged``, newest first)
    only for one whose logs are all kept, through those of the damaged ones (a log
    missing there held records that no older checkpoint has). None when there is no checkpoint. A
    checkpoint removed while this looks is skipped (an older one can be in use).

    Raises:
        LogCorruptionError: the newest checkpoint's damage, when no older intact
            checkpoint with its logs can stand in.
        CoordinatorError: a checkpoint is in the format before check bytes.
    """
    damaged: list[tuple[int, LogCorruptionError]] = []
    for n in reversed(file_numbers(d, CHECKPOINT_PREFIX)):
        path = checkpoint_path(d, n)
        try:
            cf = CheckpointFile(path)
            read_state(cf)
        except LogCorruptionError as err:
            if not path.exists():
                continue
            damaged.append((n, err))
            continue
        if damaged and not _chain_kept(d, n):
            break  # its logs are gone: it cannot stand in for the damaged one
        return n, cf, damaged
    if damaged:
        raise damaged[0][1]
    return None


def check_log_chain(d: Path, n: int) -> list[int]:
    """The logs of ``d`` a replay from checkpoint ``n`` reads: log ``n`` and each log
    after it, up to the newest log or checkpoint, with none missing.

    Every flow creates log N, and syncs its directory entry, before it writes checkpoint
    N; only a first start writes checkpoint 1 first (``interrupted_first_start``: a
    checkpoint 1 alone is its leftovers, not damage). So each of those logs was written,
    and a replay without one would quietly take the instance back to an older state.

    Raises:
        MissingLogError: one of those logs is gone.
    """
    # Checkpoints first: one listed now had its log before it, so the logs listed next
    # include it even while other processes go on writing the directory.
    checkpoints = file_numbers(d, CHECKPOINT_PREFIX)
    logs = [k for k in file_numbers(d, LOG_PREFIX) if k >= n]
    if n == 1 and not logs and checkpoints == [1]:
        return logs
    end = max(n, *logs[-1:], *checkpoints[-1:])
    kept = set(logs)
    for k in range(n, end + 1):
        if k in kept:
            continue
        later = [j for j in logs if j > k]
        if later:
            why = f"{LOG_PREFIX}{later[0]} follows it in the log chain"
        else:
            newest = max(c for c in checkpoints if c >= k)
            why = (f"{CHECKPOINT_PREFIX}{newest} exists, and a checkpoint is written only "
                   "once its log exists")
        raise MissingLogError(
            str(log_path(d, k)),
            f"{why}; recovering without it would lose the records it held: restore it "
            "from a copy of the directory (nothing in it was changed)")
    return logs


def _chain_kept(d: Path, n: int) -> bool:
    try:
        check_log_chain(d, n)
    except MissingLogError:
        return False
    return True


def _plan_from(d: Path, committer_id: int, n: int, cf: CheckpointFile) -> RecoveryPlan:
    next_seq, inputs, outputs = read_state(cf)
    logs = check_log_chain(d, n)
    plan = RecoveryPlan(d, committer_id, cf, n, logs, next_seq, next_seq, inputs, outputs)
    for i, k in enumerate(logs):
        scan = _log_scan(plan, k, plan.next_seq, last=i == len(logs) - 1)
        plan.offsets[k] = starts = array("q")
        scan.spans(starts, plan.inputs)
        plan.records += scan.count
        if scan.last_seq is not None:
            plan.next_seq = scan.last_seq + 1
        if scan.torn_at is not None:
            plan.torn = (scan.path, scan.torn_at)
            plan.torn_zeros = scan.zero_tail
    return plan


def _log_scan(plan: RecoveryPlan, k: int, first_seq: int, *, last: bool) -> LogScan:
    """The scan of log ``k`` of the plan, whose first record must be ``first_seq``;
    only the newest log, or a sealed one, may end torn. Any may end in zeros (an
    active/active primary leaves them; they never hide a record: the next log's first
    sequence id is checked against this one's last)."""
    seal = read_seal(plan.directory, k)
    return LogScan(log_path(plan.directory, k), allow_torn_tail=last or seal is not None,
                   first_seq=first_seq, committer_id=plan.committer_id, limit=seal)


def replay_records(plan: RecoveryPlan) -> Iterator[DiskRecord]:
    """The whole records of the plan's logs in order, read again from disk."""
    expect = plan.start_seq
    for i, k in enumerate(plan.logs):
        for rec in _log_scan(plan, k, expect, last=i == len(plan.logs) - 1):
            yield rec
            expect = rec.seq_id + 1


def replay_wire(plan: RecoveryPlan, max_bytes: int = 1 << 20
                ) -> Iterator[tuple[bytes | bytearray, int]]:
    """The plan's records in wire form, ``(bytes, last sequence id)`` about ``max_bytes``
    at a time, from the record spans ``plan_recovery`` found (no second parse)."""
    seq = plan.start_seq
    for k in plan.logs:
        starts = plan.offsets[k]
        yield from wire_batches(log_path(plan.directory, k), starts, seq, max_bytes)
        seq += len(starts)


@attrs.frozen
class ReplayEstimate:
    """How much a recovery from the newest checkpoint will replay, from the log files'
    written sizes (without a live log's zero tail): ``records`` is exact when ``exact``
    (every record was read), otherwise the bytes divided by the mean size of the first
    records."""

    records: int
    log_bytes: int
    exact: bool


def estimate_replay(d: Path, sample: int = 1000) -> ReplayEstimate | None:
    """An estimate of the records a recovery of directory ``d`` will replay, reading at
    most ``sample`` records (None when there is no checkpoint: nothing to replay).

    For a progress bar only: it checks nothing, so a damaged log gives a rough figure
    here and its error from the recovery itself."""
    n = latest_checkpoint(d)
    if n is None:
        return None
    sizes = []
    for k in file_numbers(d, LOG_PREFIX):
        if k >= n:
            try:  # not the file's size: a live log ends in zeros written ahead
                sizes.append((k, written_end(log_path(d, k))))
            except FileNotFoundError:
                continue
    total = sum(size for _, size in sizes)
    counted = spanned = ends = 0
    whole = True  # every record so far was read
    try:
        for k, _ in sizes:
            scan = LogScan(log_path(d, k))
            for rec in scan:
                counted += 1
                spanned += rec.end - rec.offset
                if counted >= sample:
                    whole = False
                    break
            if not whole:
                break
            ends += scan.good_end
    except LogCorruptionError:
        whole = False
    if whole:
        return ReplayEstimate(counted, ends, True)
    return ReplayEstimate(round(total * counted / spanned) if spanned else 0, total, False)
