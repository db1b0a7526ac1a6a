"""Metrics in the Prometheus exposition format: the shared option and server, then an
immortal under ``ambrosia run`` with its binding's and its coordinator's metrics scraped
over HTTP and parsed as Prometheus parses them; a replay is never counted as live."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ambrosia_core.errors import AddressError
from ambrosia_core.metrics import (
    DEFAULT_HOST,
    Families,
    Histogram,
    MetricsError,
    metrics_address,
    serve,
)
from ambrosia_core.ports import free_ports
from tests.core.metrics_app import TICKS
from tests.core.scraping import scrape, value
from tests.launcher import ROOT, Launcher, launcher

__all__ = ["launcher"]

# ------------------------------------------------------------------ the shared helper


def test_the_option_takes_a_port_or_host_and_port_and_says_what_is_wrong() -> None:
    assert str(metrics_address("9464")) == f"{DEFAULT_HOST}:9464"
    assert str(metrics_address(":9464")) == f"{DEFAULT_HOST}:9464"
    assert str(metrics_address("0.0.0.0:80")) == "0.0.0.0:80"
    assert str(metrics_address("[::1]:9464")) == "[::1]:9464"
    for text, why in [("nine", "--metrics 'nine' is not [HOST:]PORT"),
                      ("0", "(the port must be from 1 to 65535)"),
                      ("::1:80", "(an IPv6 host goes in brackets, as in [::1]:7000)")]:
        with pytest.raises(AddressError) as info:
            metrics_address(text)
        assert why in str(info.value) and "\n" not in str(info.value)


def test_sources_are_merged_by_name_and_histograms_are_cumulative() -> None:
    hist = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 7.0):
        hist.observe(v)

    def one(f: Families) -> None:
        f.counter("ambrosia_test_things", "Things", 3, who="one")
        f.histogram("ambrosia_test_seconds", "Seconds", hist)

    def two(f: Families) -> None:
        f.counter("ambrosia_test_things", "Things", 5, who="two")

    (port,) = free_ports(1)
    server = serve(metrics_address(str(port)), [one, two])
    assert server is not None
    try:
        got = scrape(port)
        assert value(got, "ambrosia_test_things_total", who="one") == 3
        assert value(got, "ambrosia_test_things_total", who="two") == 5
        # le is "less than or equal": 0.1 falls in the 0.1 bucket.
        assert [value(got, "ambrosia_test_seconds_bucket", le=le)
                for le in ("0.1", "1.0", "+Inf")] == [2, 3, 4]
        assert value(got, "ambrosia_test_seconds_count") == 4
        assert value(got, "ambrosia_test_seconds_sum") == pytest.approx(7.65)
        server.remove(two)
        assert ("ambrosia_test_things_total", frozenset({("who", "two")})) not in scrape(port)
    finally:
        server.close()
    assert serve(None) is None  # off unless asked


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another socket listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_port_in_use_or_an_address_not_here_is_refused_in_one_line(taken: int) -> None:
    with pytest.raises(MetricsError) as info:
        serve(metrics_address(str(taken)))
    assert str(info.value) == (f"--metrics 127.0.0.1:{taken}: cannot serve metrics there: "
                               "Address already in use (another process listens on that "
                               "port)")
    with pytest.raises(MetricsError) as info:
        serve(metrics_address("192.0.2.1:9464"))  # TEST-NET-1: no interface of ours
    assert str(info.value) == ("--metrics 192.0.2.1:9464: cannot serve metrics there: "
                               "Cannot assign requested address")


# ------------------------------------------------------------------ ambrosia run


def test_a_run_exports_live_inputs_the_log_and_a_replay_apart(launcher: Launcher) -> None:
    binding, coordinator = free_ports(2)
    args = ["--metrics", str(binding), "--coordinator-metrics", f"127.0.0.1:{coordinator}"]
    p = launcher.start("tests.core.metrics_app:Ticker", "ticker", args=args)
    p.wait_for(f"ticks: {TICKS}")
    b, c = scrape(binding), scrape(coordinator)
    # Live: the first start's InitialMessage and every tick; nothing replayed.
    assert value(b, "ambrosia_binding_inputs_applied_total") == TICKS + 1
    assert value(b, "ambrosia_binding_messages_replayed_total") == 0
    assert value(b, "ambrosia_binding_primary") == 1
    assert value(b, "ambrosia_binding_checkpoints_written_total") == 1  # becoming primary
    assert value(b, "ambrosia_binding_checkpoint_write_bytes_count") == 1
    # The coordinator logged the same inputs, one sync per record.
    records = value(c, "ambrosia_ic_log_records_total")
    assert value(c, "ambrosia_ic_inputs_logged_total") == TICKS + 1
    assert value(c, "ambrosia_ic_log_syncs_total") == records >= 2
    assert value(c, "ambrosia_ic_log_sync_seconds_count") == records
    assert value(c, "ambrosia_ic_log_next_record") == records
    assert value(c, "ambrosia_ic_log_written_bytes_total") > 0
    assert value(c, "ambrosia_ic_checkpoints_total") == 1
    assert value(c, "ambrosia_ic_role", role="primary") == 1
    assert value(c, "ambrosia_ic_phase", phase="live") == 1
    assert value(c, "ambrosia_ic_replay_records") == 0
    first_bytes = value(c, "ambrosia_ic_log_written_bytes_total")
    p.stop()

    # Again: the log is replayed, which counts apart from live inputs (none come now).
    p = launcher.start("tests.core.metrics_app:Ticker", "ticker", args=args)
    b, c = scrape(binding), scrape(coordinator)
    assert value(b, "ambrosia_binding_inputs_applied_total") == 0
    assert value(b, "ambrosia_binding_messages_replayed_total") == TICKS + 1
    assert value(b, "ambrosia_binding_checkpoints_loaded_total") == 1
    assert value(b, "ambrosia_binding_checkpoint_load_seconds_count") == 1
    assert value(c, "ambrosia_ic_replay_records") == records
    assert value(c, "ambrosia_ic_replay_records_done") == records
    assert value(c, "ambrosia_ic_inputs_logged_total") == 0
    assert value(c, "ambrosia_ic_log_next_record") == records
    assert first_bytes > 0
    p.stop()


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The repository first, and whatever path the tests run with after it.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, AMBROSIA_HOME=str(home), PYTHONPATH=path)
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_a_metrics_port_in_use_stops_the_start_in_one_line(tmp_path: Path,
                                                           taken: int) -> None:
    target = ["run", "tests.core.metrics_app:Ticker", "-i", "t"]
    ran = _run(tmp_path, *target, "--metrics", str(taken))
    assert ran.returncode == 1
    assert ran.stderr.splitlines()[-1] == (
        f"ambrosia run: error: --metrics 127.0.0.1:{taken}: cannot serve metrics there: "
        "Address already in use (another process listens on that port)")
    assert "Traceback" not in ran.stderr
    ran = _run(tmp_path, *target, "--coordinator-metrics", str(taken))
    assert ran.returncode == 1
    # Refused before the instance is registered, in the words of the option given.
    assert ran.stderr.splitlines() == [
        f"ambrosia run: error: --coordinator-metrics 127.0.0.1:{taken}: cannot serve "
        "metrics there: Address already in use (another process listens on that port)"]
    assert not (tmp_path / "instances").exists()
    bad = _run(tmp_path, *target, "--metrics", "localhost")
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "ambrosia run: error: argument --metrics: 'localhost' is not [HOST:]PORT"]
    alone = _run(tmp_path, "ic", "-i", "t", "--metrics", str(taken))
    assert alone.returncode == 1
    assert alone.stderr.splitlines() == [
        f"ambrosia: error: --metrics 127.0.0.1:{taken}: cannot serve metrics there: Address "
        "already in use (another process listens on that port)"]
