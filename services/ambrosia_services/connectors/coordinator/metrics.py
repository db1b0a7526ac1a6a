"""The connector coordinator's metrics, read from what the state and the primary's I/O
already keep: per stream, messages received (this life), applied, dropped, the message
id acknowledged, and the lag; per sink, committed bytes, commits, aborts, pending bytes,
the link, and the commit latency as a histogram (``commits.CommitClock``'s listeners).

Only the primary exports them (``live.Live`` adds the source when the process serves
metrics and takes it away when the primary's I/O ends), so a replay is never counted.
Received messages are counted per stream as the listener hands them to the ``receive``
Impulses, a loop over each batch the Impulse serializes anyway; nothing else is added to
the paths of messages, and nothing here is in the state or the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ambrosia_core.metrics import DURATION_BUCKETS, Families, Histogram

from .commits import Commit
from .core import FROM_START, ConnectorCore, Incoming, IncomingRef
from .sources import SourceListener

__all__ = ["ConnectorMetrics"]


class ConnectorMetrics:
    """What the metrics keep beside the state for one primary life.

    Args:
        core: reads the state (anew each time: an upgrade or a load may replace it).
        instance_name: the label of every metric.
    """

    def __init__(self, core: Callable[[], ConnectorCore], instance_name: str) -> None:
        self._core = core
        self.instance_name = instance_name
        self.received: dict[int, int] = {}  # stream id -> messages sent to the log, this life
        # Per stream, messages applied or dropped when this life became primary: what
        # it has applied since is the difference, the lag what it received beyond that.
        self.baseline = {sid: r.applied + r.dropped for sid, r in core().streams.items()}
        self.latency: dict[str, Histogram] = {}  # sink -> commit latency (seconds)

    def counting(self, send: Callable[[int, list[Incoming]], Any]
                 ) -> Callable[[int, list[Incoming]], None]:
        """``send`` (the ``receive`` Impulse), counting each batch's messages per stream."""
        received = self.received

        def receive(token: int, batch: list[Incoming]) -> None:
            for item in batch:
                sid = item[0]
                received[sid] = received.get(sid, 0) + 1
            send(token, batch)
        return receive

    def counting_staged(self, send: Callable[[int, list[IncomingRef]], Any]
                        ) -> Callable[[int, list[IncomingRef]], None]:
        """``send`` (the ``receive_staged`` Impulse), counting each run's messages."""
        received = self.received

        def receive_staged(token: int, batch: list[IncomingRef]) -> None:
            for fields in batch:  # [stream name, stream id, first id, last id, count, ...]
                sid = fields[1]
                received[sid] = received.get(sid, 0) + fields[4]
            send(token, batch)
        return receive_staged

    def committed(self, commit: Commit) -> None:
        """A ``CommitClock`` listener: one commit's latency."""
        hist = self.latency.get(commit.sink)
        if hist is None:
            hist = self.latency[commit.sink] = Histogram(DURATION_BUCKETS)
        hist.observe(commit.latency)

    def read(self, f: Families, sources: SourceListener, links: Mapping[str, Any]) -> None:
        """Everything, as of now (on the exposition server's thread: copies first), with
        the primary's listener and its sinks' links (``live.Live`` passes them)."""
        core = self._core()
        name = {"instance_name": self.instance_name}
        received = dict(self.received)
        for sid, rec in sorted(dict(core.streams).items()):
            labels = {"stream": str(sid), "stream_name": rec.name, **name}
            got = received.get(sid, 0)
            f.counter("ambrosia_connector_stream_received_messages", "Messages of the stream "
                      "the primary received and sent to the log, this life", got, **labels)
            f.counter("ambrosia_connector_stream_applied_messages", "Messages of the stream "
                      "applied, since the instance began", rec.applied, **labels)
            f.counter("ambrosia_connector_stream_dropped_messages", "Messages of the stream "
                      "dropped as sent again, since the instance began", rec.dropped,
                      **labels)
            f.counter("ambrosia_connector_stream_applied_lines", "Lines of the stream's "
                      "applied messages", rec.lines, **labels)
            if rec.por != FROM_START:
                f.gauge("ambrosia_connector_stream_acknowledged_message_id", "The id of the "
                        "stream's last message applied, which the source is acknowledged "
                        "up to", rec.por, **labels)
            done = rec.applied + rec.dropped - self.baseline.get(sid, 0)
            f.gauge("ambrosia_connector_stream_lag_messages", "Messages of the stream "
                    "received and not yet applied", max(got - done, 0), **labels)
        f.counter("ambrosia_connector_received_messages", "Messages received from sources, "
                  "this life (re-sent ones included)", sources.received, **name)
        f.counter("ambrosia_connector_acknowledged_messages", "Messages acknowledged to "
                  "sources, this life", sources.acked, **name)
        f.gauge("ambrosia_connector_source_connections", "Sources connected",
                sources.connections, **name)
        links = dict(links)
        latency = dict(self.latency)
        for sink, srec in sorted(dict(core.sinks).items()):
            labels = {"sink": sink, **name}
            f.counter("ambrosia_connector_sink_committed_bytes", "Bytes the sink committed, "
                      "since the instance began", srec.committed, **labels)
            f.counter("ambrosia_connector_sink_commits", "Transactions the sink committed",
                      srec.commits, **labels)
            f.counter("ambrosia_connector_sink_aborts", "Transactions the sink aborted",
                      srec.aborts, **labels)
            f.gauge("ambrosia_connector_sink_pending_bytes", "Bytes waiting for a commit",
                    len(srec.pending), **labels)
            f.gauge("ambrosia_connector_sink_transaction_open", "1 while a transaction is "
                    "in flight", float(bool(srec.txn_id)), **labels)
            link = links.get(sink)
            f.gauge("ambrosia_connector_sink_linked", "1 while the sink's link is connected",
                    float(bool(getattr(link, "connected", False))), **labels)
            f.histogram("ambrosia_connector_commit_latency_seconds", "From the emit of a "
                        "transaction's oldest byte to its commit, as this primary saw it",
                        latency.get(sink) or _EMPTY, **labels)


_EMPTY = Histogram(DURATION_BUCKETS)  # never observed: a sink with no commit yet
