"""The coordinator's metrics: a source (``ambrosia_core.metrics``) that reads, when a
scrape comes, what a ``Coordinator`` keeps anyway: its counts (``stats.CoordinatorStats``,
of this process's life), the log's positions (records, calls per sender and per
destination, since the instance began), its phase and role, and the epoch an active/active
replica holds.
"""

from __future__ import annotations

from collections.abc import Callable

from ambrosia_core.metrics import Families, Source

from .lifecycle import Coordinator
from .phase import Phase

__all__ = ["ROLES", "coordinator_source", "standalone_role"]


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
