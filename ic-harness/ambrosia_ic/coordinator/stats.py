"""What a coordinator counts of its own work, for its metrics: the log it wrote and
synced, the checkpoints it saved, and how far a recovery's replay has got.

Plain numbers that the commit path and the flows add to, and a source
(``ambrosia_core.metrics``) reads when a scrape comes; nothing decides anything by them.
Counts are of this process's life; the positions (records, calls per sender and per
destination) are the log's, since the instance began.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ambrosia_core.metrics import DURATION_BUCKETS, SIZE_BUCKETS, Families, Histogram, Source

from .phase import Phase

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["ROLES", "CoordinatorStats", "coordinator_source", "standalone_role"]


class CoordinatorStats:
    """This life's counts (see the module docstring)."""

    def __init__(self) -> None:
        self.records = 0  # log records written and synced
        self.log_bytes = 0  # their bytes, as the log holds them
        self.inputs = 0  # inputs they hold (calls, Impulses, the InitialMessage)
        self.syncs = 0  # writes made durable (one per record)
        self.sync_seconds = Histogram(DURATION_BUCKETS)  # write and sync of one record
        self.checkpoints = 0  # checkpoints saved
        self.checkpoint_bytes = Histogram(SIZE_BUCKETS)
        self.checkpoint_seconds = Histogram(DURATION_BUCKETS)
        # A recovery's replay: the records from ``replay_first`` up to ``replay_end``
        # (excluded) are delivered again; both 0 when there was none.
        self.replay_first = 0
        self.replay_end = 0


#: The roles ``ambrosia_ic_role`` tells apart: a standalone coordinator's (from its
#: phase) and an active/active replica's (``replication``).
ROLES = ("starting", "recovering", "primary", "standby", "checkpointer", "upgrader")


def standalone_role(phase: Phase) -> str:
    if phase is Phase.LIVE:
        return "primary"
    if phase in (Phase.RECOVERING, Phase.UPGRADING):
        return "recovering"
    return "standby" if phase is Phase.FOLLOWING else "starting"


def coordinator_source(c: Coordinator, role: Callable[[], str] | None = None) -> Source:
    """The source of ``c``'s metrics (read on the exposition server's thread).

    Args:
        role: says the role of an active/active replica (default: the standalone
            coordinator's, from its phase).
    """
    def read(f: Families) -> None:
        s = c.stats
        name = {"instance_name": c.name}
        f.counter("ambrosia_ic_log_records", "Log records written and synced by this "
                  "process", s.records, **name)
        f.counter("ambrosia_ic_log_written_bytes", "Bytes of log records written by this "
                  "process", s.log_bytes, **name)
        f.counter("ambrosia_ic_log_syncs", "Log writes made durable (write and sync) by "
                  "this process", s.syncs, **name)
        f.histogram("ambrosia_ic_log_sync_seconds", "Time to write and sync one log record",
                    s.sync_seconds, **name)
        f.counter("ambrosia_ic_inputs_logged", "Inputs (calls, Impulses, the InitialMessage) "
                  "logged by this process", s.inputs, **name)
        f.gauge("ambrosia_ic_log_next_record", "The sequence number of the next log record",
                c.core.group.next_seq, **name)
        for sender, last in sorted(dict(c.core.group.inputs).items()):
            f.counter("ambrosia_ic_calls_in", "Calls from a sender (this instance itself "
                      "for self-calls) the log holds, since the instance began", last,
                      sender=sender, **name)
        for dest, box in sorted(dict(c.core.outboxes).items()):
            f.counter("ambrosia_ic_calls_out", "Calls sent to another instance, since the "
                      "instance began", box.next_seq - 1, destination=dest, **name)
            f.counter("ambrosia_ic_calls_out_acknowledged", "Calls another instance said "
                      "it logged, since the instance began", box.acked, destination=dest,
                      **name)
        f.counter("ambrosia_ic_checkpoints", "Checkpoints saved by this process",
                  s.checkpoints, **name)
        f.histogram("ambrosia_ic_checkpoint_bytes", "Size of each checkpoint saved",
                    s.checkpoint_bytes, **name)
        f.histogram("ambrosia_ic_checkpoint_seconds", "Time to write each checkpoint "
                    "durably", s.checkpoint_seconds, **name)
        phase = c.core.phase
        for p in Phase:
            f.gauge("ambrosia_ic_phase", "1 for the phase the coordinator is in (following: "
                    "an active/active standby; live: the primary)", float(p is phase),
                    phase=p.value, **name)
        now = role() if role is not None else standalone_role(phase)
        for r in ROLES:
            f.gauge("ambrosia_ic_role", "1 for the coordinator's role (an active/active "
                    "replica's, else primary once live)", float(r == now), role=r, **name)
        epoch = c.sink.epoch
        if epoch is not None:
            f.gauge("ambrosia_ic_epoch", "The epoch this active/active replica holds", epoch,
                    **name)
        total = s.replay_end - s.replay_first
        done = (total if phase is Phase.LIVE else
                min(max(c.core.last_delivered + 1 - s.replay_first, 0), total))
        f.gauge("ambrosia_ic_replay_records", "Records a recovery replays to the binding",
                total, **name)
        f.gauge("ambrosia_ic_replay_records_done", "Records of the recovery's replay "
                "delivered so far", done, **name)
    return read
