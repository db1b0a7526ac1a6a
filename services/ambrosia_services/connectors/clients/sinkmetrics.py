"""What a 2PC sink counts of its transactions, and its metrics (``--metrics [HOST:]PORT``
of every sink command): transactions prepared (voted yes), refused (voted no), committed
and aborted, the bytes committed, and how long a vote and a commit took to become
durable. The server (``sinkserver.SinkServer``) adds to the counts as it answers each
Phase1 and Phase2; a scrape reads them with the store's offsets. Counts are of this
process's life; the offsets are the store's.
"""

from __future__ import annotations

from typing import Protocol

from ambrosia_core.metrics import DURATION_BUCKETS, Families, Histogram, Source

__all__ = ["MeasuredSink", "SinkCounts", "sink_source"]


class SinkCounts:
    """A sink server's counts (see the module docstring)."""

    def __init__(self) -> None:
        self.prepared = 0  # Phase1s voted yes
        self.refused = 0  # Phase1s voted no
        self.committed = 0  # Phase2 commits that committed (not repeats)
        self.aborted = 0  # Phase2 aborts
        self.committed_bytes = 0
        self.prepare_seconds = Histogram(DURATION_BUCKETS)
        self.commit_seconds = Histogram(DURATION_BUCKETS)


class _Offsets(Protocol):
    @property
    def committed_offset(self) -> int: ...

    @property
    def output_offset(self) -> int: ...


class MeasuredSink(Protocol):
    """What the metrics read of a sink server (``sinkserver.SinkServer``): its counts, its
    store's offsets, and whether a coordinator's link is being served."""

    @property
    def counts(self) -> SinkCounts: ...

    @property
    def store(self) -> _Offsets: ...

    @property
    def linked(self) -> bool: ...


def sink_source(server: MeasuredSink) -> Source:
    """The metrics of ``server`` and its store (read on the exposition server's thread)."""
    def read(f: Families) -> None:
        c = server.counts
        f.counter("ambrosia_sink_transactions_prepared", "Phase1s this sink voted yes on",
                  c.prepared)
        f.counter("ambrosia_sink_transactions_refused", "Phase1s this sink voted no on",
                  c.refused)
        f.counter("ambrosia_sink_transactions_committed", "Transactions committed (a "
                  "repeated Phase2 not counted)", c.committed)
        f.counter("ambrosia_sink_transactions_aborted", "Transactions aborted", c.aborted)
        f.counter("ambrosia_sink_committed_bytes", "Bytes committed by this process",
                  c.committed_bytes)
        f.histogram("ambrosia_sink_prepare_seconds", "Time to make a yes vote durable",
                    c.prepare_seconds)
        f.histogram("ambrosia_sink_commit_seconds", "Time to make a commit durable",
                    c.commit_seconds)
        store = server.store
        f.gauge("ambrosia_sink_committed_offset_bytes", "The end of the committed output",
                store.committed_offset)
        f.gauge("ambrosia_sink_output_offset_bytes", "The end of the output taken "
                "(committed, prepared and written since)", store.output_offset)
        f.gauge("ambrosia_sink_linked", "1 while a coordinator's link is being served",
                float(server.linked))
    return read
