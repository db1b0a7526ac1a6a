"""What a coordinator counts of its own work, for its metrics: the log it wrote and
synced, the checkpoints it saved, and how far a recovery's replay has got.

Plain numbers that the commit path and the flows add to, and that the metrics source
(``metrics.coordinator_source``) reads when a scrape comes; nothing decides anything by
them. Counts are of this process's life.
"""

from __future__ import annotations

from ambrosia_core.metrics import DURATION_BUCKETS, SIZE_BUCKETS, Histogram

__all__ = ["CoordinatorStats"]


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
