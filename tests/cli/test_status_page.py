"""The status page (``ambrosia status -i NAME --listen``) in a real headless browser: Debian's
chromium driven by playwright, loading the page while a connector coordinator under
``ambrosia run`` takes a feed's lines and commits them to a real 2PC file sink, then
after the instance stops, then after the server stops."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, Playwright, expect, sync_playwright

from ambrosia_core.ports import free_ports
from ambrosia_core.processes import Child
from ambrosia_py.testing import start_immortal
from tests.launcher import ROOT, wait_until
from tests.services.connectors.clients.helpers import SinkProcess

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
# No sandbox (tests may run as root, where chromium's needs a user namespace), and none of
# the requests a browser makes on its own: the machine may have no network at all.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
WAIT_MS = 15_000


def _need_chromium() -> None:
    """A run without the browser fails, in one line that says what to do (a skip would
    leave the page untested and look like a pass)."""
    if not CHROMIUM.exists():
        pytest.fail(f"no chromium at {CHROMIUM}: the status page's browser test needs "
                    "Debian's chromium; run `make install`", pytrace=False)


def _browser(pw: Playwright, profile: Path) -> BrowserContext:
    return pw.chromium.launch_persistent_context(
        str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


def _cell(page: Page, table: str, key: str, column: str) -> Any:
    return page.locator(f'#{table} tr[data-key="{key}"] td[data-col="{column}"]')


def _grouped(n: int) -> str:
    """A count as the page writes it."""
    return f"{n:,}"


def _ambrosia(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMBROSIA_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _settled(status_file: Path, lines: int, size: int) -> dict[str, Any]:
    """The status file once every line is applied and committed to the sink ``out``."""
    def settled() -> dict[str, Any] | None:
        try:
            report = json.loads(status_file.read_text())
        except (OSError, ValueError):
            return None
        streams = list((report.get("streams") or {}).values())
        out = (report.get("sinks") or {}).get("out", {})
        if streams and streams[0]["applied"] == lines and streams[0]["closed"] and \
                out.get("committed") == size and report.get("acked") == lines:
            return dict(report)
        return None

    return dict(wait_until(settled, "every line applied and committed in the status file"))


def test_the_page_shows_a_running_coordinator_then_its_stop(tmp_path: Path) -> None:
    _need_chromium()
    home = tmp_path / "home"
    name = "paged"
    data = tmp_path / "lines.txt"
    lines = 3000
    data.write_text("".join(f"line {i}\n" for i in range(lines)))
    size = data.stat().st_size
    status_file = tmp_path / "status.json"
    listen, nobody = free_ports(2)  # no sink listens on the second: a warning, said
    sink = SinkProcess(tmp_path / "sink", tmp_path / "sink.log")
    coord = None
    server = None
    try:
        coord = start_immortal(
            "ambrosia_services.connectors:ConnectorCoordinator", name, home=home,
            cwd=tmp_path,
            args=["--set", f"listen=127.0.0.1:{listen}",
                  "--set", f"sinks.out=127.0.0.1:{sink.port}",
                  "--set", f"sinks.gone=127.0.0.1:{nobody}",
                  "--set", f"status_file={status_file}", "--set", "status_seconds=0.2",
                  "--set", "interval_seconds=0.1", "--set", "interval_bytes=4096"])
        server = Child.start(
            [sys.executable, "-m", "ambrosia_cli", "status", "-i", name, "--listen", "0"],
            env=dict(os.environ, AMBROSIA_HOME=str(home)), cwd=ROOT, name="the page server")
        found = re.search(r"at (http://127\.0\.0\.1:\d+/) ", server.wait_for("http://", 30))
        assert found, server.lines
        url = found.group(1)

        with sync_playwright() as pw:
            browser = _browser(pw, tmp_path / "profile")
            page = browser.new_page()
            requests: list[str] = []
            problems: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.goto(url)
            expect(page.locator("#name")).to_have_text(name, timeout=WAIT_MS)

            feed = subprocess.run(
                [sys.executable, "-m", "ambrosia_services.connectors.clients.feed", "--connect",
                 f"127.0.0.1:{listen}", "--once", str(data)],
                cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert feed.returncode == 0, feed.stderr
            report = _settled(status_file, lines, size)
            # The instance's own history: a sample per write, newest last, with the
            # commits' latency measured between samples.
            history = report["history"]
            assert len(history) > 1 and history[-1]["applied"] == lines
            assert [s["time"] for s in history] == sorted(s["time"] for s in history)
            assert 0 < sum(s["commits"] for s in history) <= report["sinks"]["out"]["commits"]
            assert any(s["latency_ms"] is not None for s in history)

            # The streams, with the counts of the status file.
            (sid, stream), = report["streams"].items()
            for column in ("applied", "lines"):
                expect(_cell(page, "streams", sid, column)).to_have_text(
                    _grouped(stream[column]), timeout=WAIT_MS)
            expect(_cell(page, "streams", sid, "name")).to_have_text(str(data))
            expect(_cell(page, "streams", sid, "closed")).to_have_text("yes")
            # The sinks: the file sink linked with everything committed, the other not.
            expect(_cell(page, "sinks", "out", "committed")).to_have_text(_grouped(size),
                                                                          timeout=WAIT_MS)
            expect(_cell(page, "sinks", "out", "linked")).to_have_text("yes")
            expect(_cell(page, "sinks", "gone", "linked")).to_have_text("no")
            # The replica holding the log lock: the coordinator `ambrosia run` started.
            expect(_cell(page, "replicas", "0", "log_lock")).to_have_text(
                re.compile(r"^held \(pid \d+\)$"))
            # The chart: rates between samples, and the commits' latency.
            chart = page.locator("#throughput")
            expect(chart).to_have_attribute("data-points", re.compile(r"^([2-9]|\d\d+)$"))
            assert len(chart.locator("polyline").first.get_attribute("points").split()) > 1
            expect(page.locator("#latency")).not_to_have_attribute("data-points", "0")
            # The unreachable sink's warning, as the instance logged it.
            assert any("sink gone" in e["message"] for e in report["errors"])
            expect(page.locator("#errors")).to_contain_text(
                re.compile(r"WARNING ambrosia\.paged sink gone \(127\.0\.0\.1:\d+\): .*"
                           r"reconnecting"))
            expect(page.locator("#banner")).to_be_hidden()

            stopped = _ambrosia(home, "stop", "-i", name)
            assert stopped.returncode == 0, stopped.stderr
            assert coord.wait(30) == 0
            banner = page.locator("#banner")
            expect(banner).to_have_text(re.compile(r"^stopped: last status of \d+ s ago$"),
                                        timeout=WAIT_MS)
            expect(_cell(page, "streams", sid, "applied")).to_have_text(_grouped(lines))

            assert not problems, problems  # no script error, no failed request so far

            server.send_signal(signal.SIGTERM)
            assert server.wait(10) == 0, server.lines
            expect(page.locator("#offline")).to_contain_text(
                "the status server does not answer", timeout=WAIT_MS)
            # The page asked its own server for everything, and nothing else.
            assert requests and all(r.startswith(url) for r in requests), requests
            browser.close()
    finally:
        if server is not None:
            server.kill()
        if coord is not None:
            coord.kill()
        sink.kill()
