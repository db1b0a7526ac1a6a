"""The connector coordinator's metrics and the 2PC file sink's, scraped from real
processes: two feeds over sockets into ``ambrosia run connectors --metrics``, its output
committed to ``ambrosia-sink --metrics``; what each exports agrees with what was fed and
with what the other committed."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ambrosia_core.ports import free_ports
from tests.core.scraping import Samples, scrape, value
from tests.launcher import ROOT, Launcher, wait_until
from tests.services.connectors.clients.helpers import SinkProcess

from .peers import Feed, lines

pytestmark = pytest.mark.integration

FED = {3: 300, 8: 120}  # stream id -> messages fed


def test_streams_sinks_and_commit_latency_agree_with_the_sink(launcher: Launcher,
                                                              tmp_path: Path) -> None:
    listen, coordinator, binding, sink_metrics = free_ports(4)
    sink = SinkProcess(tmp_path / "sink", tmp_path / "sink.log",
                       extra=["--metrics", str(sink_metrics)])
    try:
        cfg = tmp_path / "coord.toml"
        cfg.write_text(f'listen = "127.0.0.1:{listen}"\ninterval_bytes = 2000\n'
                       f'interval_seconds = 0.2\n[sinks]\nout = "127.0.0.1:{sink.port}"\n')
        p = launcher.start("connectors", "coord", args=[
            "--config", str(cfg), "--metrics", str(binding),
            "--coordinator-metrics", str(coordinator)])
        p.wait_for("listening for sources")
        feeds = [Feed(listen, sid, n, chunk=40) for sid, n in FED.items()]
        for feed in feeds:
            feed.join(60)
        total = b"".join(m.payload for sid, n in FED.items()
                         for m in lines(sid, range(1, n + 1)))
        wait_until(lambda: (sink.directory / "committed").exists()
                   and len(sink.committed()) == len(total), "every line committed", 30)

        def settled() -> Samples:
            got = scrape(binding)
            return got if value(got, "ambrosia_connector_sink_pending_bytes", sink="out") == 0 \
                else {}
        wait_until(lambda: bool(settled()), "the metrics settled", 30)
        b, s = scrape(binding), scrape(sink_metrics)
        for sid, n in FED.items():
            stream = {"stream": str(sid), "stream_name": f"stream-{sid}"}
            assert value(b, "ambrosia_connector_stream_received_messages_total", **stream) == n
            assert value(b, "ambrosia_connector_stream_applied_messages_total", **stream) == n
            assert value(b, "ambrosia_connector_stream_dropped_messages_total", **stream) == 0
            assert value(b, "ambrosia_connector_stream_acknowledged_message_id", **stream) == n
            assert value(b, "ambrosia_connector_stream_lag_messages", **stream) == 0
        assert value(b, "ambrosia_connector_acknowledged_messages_total") == sum(FED.values())
        # The sink's commits, seen from both ends, and each one's latency measured.
        commits = value(s, "ambrosia_sink_transactions_committed_total")
        assert commits >= 2  # interval_bytes cuts the output into several transactions
        assert value(b, "ambrosia_connector_sink_commits_total", sink="out") == commits
        assert value(b, "ambrosia_connector_commit_latency_seconds_count", sink="out") == commits
        assert value(b, "ambrosia_connector_sink_aborts_total", sink="out") == 0
        assert value(s, "ambrosia_sink_transactions_aborted_total") == 0
        assert value(s, "ambrosia_sink_transactions_prepared_total") == commits
        assert value(s, "ambrosia_sink_prepare_seconds_count") == commits
        assert value(s, "ambrosia_sink_commit_seconds_count") == commits
        assert value(s, "ambrosia_sink_committed_bytes_total") == len(total)
        assert value(s, "ambrosia_sink_committed_offset_bytes") == len(total)
        assert value(b, "ambrosia_connector_sink_committed_bytes_total", sink="out") == len(total)
        assert value(b, "ambrosia_connector_sink_linked", sink="out") == 1
        assert value(s, "ambrosia_sink_linked") == 1
        # The coordinator logged every batch of the feeds and every vote.
        c = scrape(coordinator)
        assert value(c, "ambrosia_ic_log_written_bytes_total") > len(total)
        p.stop()
    finally:
        sink.kill()


def test_a_sink_refuses_a_metrics_port_in_use_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = subprocess.run(
            [sys.executable, "-m", "ambrosia_services.connectors.clients.filesink",
             "--listen", "127.0.0.1:0", "--dir", str(tmp_path / "sink"), "--metrics",
             str(port)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1
    assert ran.stderr.splitlines() == [
        f"ambrosia-sink: --metrics 127.0.0.1:{port}: cannot serve metrics there: Address "
        "already in use (another process listens on that port)"]
