"""The binding's metrics: what the engine applied live and replayed, and its checkpoints.

A source (``ambrosia_core.metrics``) reads counters the engine keeps anyway at scrape
time: ``_inputs_seen`` (checkpointed, so it counts since the instance began), the
protocol's count of replayed messages, the inputs handled before this life became
primary. Live inputs are the difference, so a replay never counts as live traffic.
"""

from __future__ import annotations

from ambrosia_core.metrics import Families, Source

from .engine import Engine

__all__ = ["binding_source"]


def binding_source(engine: Engine, replay_estimate: int | None = None) -> Source:
    """The source of ``engine``'s metrics.

    Args:
        replay_estimate: about how many log records the recovery replays (``ambrosia
            run`` counts them before the coordinator starts), if known.
    """
    def read(f: Families) -> None:
        conn = engine.conn
        name = {"instance_name": engine.instance_name}
        primary = conn.is_primary
        live = engine._inputs_seen - engine.inputs_before_primary if primary else 0
        f.counter("ambrosia_binding_inputs_applied", "Logged inputs handled live, since this "
                  "process became primary (calls, Impulses, results, a first start's "
                  "InitialMessage)", max(live, 0), **name)
        f.counter("ambrosia_binding_messages_replayed", "Messages of the log replayed by "
                  "this process's recovery", conn.messages_replayed, **name)
        f.gauge("ambrosia_binding_replaying", "1 while the binding replays the log",
                float(conn.is_replaying), **name)
        if replay_estimate is not None:
            f.gauge("ambrosia_binding_replay_records_estimate", "About how many log records "
                    "the recovery replays, counted before it began", replay_estimate, **name)
        f.gauge("ambrosia_binding_primary", "1 once the binding is primary", float(primary),
                **name)
        f.counter("ambrosia_binding_checkpoints_written", "Checkpoints written by this "
                  "process", engine.checkpoints_taken, **name)
        f.histogram("ambrosia_binding_checkpoint_write_seconds", "Time to write each "
                    "checkpoint (serialize the state)", engine.checkpoint_write_seconds,
                    **name)
        f.histogram("ambrosia_binding_checkpoint_write_bytes", "Size of each checkpoint "
                    "written", engine.checkpoint_write_bytes, **name)
        f.counter("ambrosia_binding_checkpoints_loaded", "Checkpoints loaded by this "
                  "process", engine.checkpoints_loaded, **name)
        f.histogram("ambrosia_binding_checkpoint_load_seconds", "Time to load each "
                    "checkpoint, from its first byte received to its state loaded",
                    engine.checkpoint_load_seconds, **name)
        f.histogram("ambrosia_binding_checkpoint_load_bytes", "Size of each checkpoint "
                    "loaded", engine.checkpoint_load_bytes, **name)
    return read
