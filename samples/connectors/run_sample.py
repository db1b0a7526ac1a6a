"""The connectors sample, end to end on free ports: two files of numbered lines go from
the file feed through the connector coordinator to the 2PC file sink; the coordinator and
then the sink are killed with kill -9 and restarted while lines keep coming. Ends with one
line saying whether the sink's committed file holds every line exactly once, in order per
file."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ambrosia_core.ports import free_ports  # noqa: E402
from ambrosia_core.processes import Child, ChildError  # noqa: E402
from ambrosia_py.testing import ImmortalProcess, start_immortal  # noqa: E402

HERE = Path(__file__).resolve().parent
STREAMS = ("orders", "clicks")  # one file (one stream) each: orders.log, clicks.log
TIMEOUT = 60.0


def say(text: str) -> None:
    print(f"connectors: {text}", flush=True)


def numbered(stream: str, first: int, last: int) -> bytes:
    """What `seq -f "STREAM %06g" FIRST LAST` prints."""
    return b"".join(f"{stream} {i:06d}\n".encode() for i in range(first, last + 1))


def wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Sample:
    """The three parts, each a process of its own, in one temporary directory."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port, self.sink_port = free_ports(2)
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        self.sink: Child | None = None
        self.coord: ImmortalProcess | None = None
        self.feed: Child | None = None

    def start_sink(self) -> None:
        self.sink = Child.start(
            [sys.executable, "-m", "ambrosia_services.connectors.clients.filesink", "--listen",
             f"127.0.0.1:{self.sink_port}", "--dir", str(self.work / "out")],
            name="the sink", env=self.env, cwd=ROOT, log=self.work / "sink.log")
        self.sink.wait_for("listening on", TIMEOUT)

    def start_coordinator(self) -> str:
        """Returns how it started: a first start, or a recovery from its log."""
        self.coord = start_immortal(
            "connectors", "connectors", home=self.work / "home",
            cwd=ROOT, env=self.env,
            args=["--config", str(HERE / "coordinator.toml"),
                  "--set", f"listen=127.0.0.1:{self.port}",
                  "--set", f"sinks.out=127.0.0.1:{self.sink_port}"])
        self.coord.wait_for("listening for sources")
        recovered = [ln for ln in self.coord.lines if "recovery complete" in ln]
        if not recovered:
            return "a first start"
        return "it recovered from its log, " + recovered[0].split("recovery complete: ")[-1]

    def start_feed(self) -> None:
        self.feed = Child.start(
            [sys.executable, "-m", "ambrosia_services.connectors.clients.feed", "--connect",
             f"127.0.0.1:{self.port}", *(f"{s}.log" for s in STREAMS)],
            name="the feed", env=self.env, cwd=self.work, log=self.work / "feed.log")

    def append(self, first: int, last: int) -> None:
        for s in STREAMS:
            with (self.work / f"{s}.log").open("ab") as f:
                f.write(numbered(s, first, last))

    def committed(self) -> dict[str, list[bytes]]:
        path = self.work / "out" / "committed"
        out: dict[str, list[bytes]] = {s: [] for s in STREAMS}
        for line in path.read_bytes().splitlines(keepends=True) if path.exists() else []:
            out.setdefault(line.split(b" ", 1)[0].decode(errors="replace"), []).append(line)
        return out

    def wait_committed(self, last: int) -> None:
        wait(lambda: all(len(v) >= last for v in self.committed().values()),
             f"line {last} of each file to be committed")

    def kill_sink(self) -> None:
        assert self.sink is not None
        self.sink.kill()

    def close(self) -> None:
        for child in (self.feed, self.sink):
            if child is not None:
                child.stop(10)
        if self.coord is not None:
            self.coord.stop()


def main(lines: int = 1000) -> int:
    with tempfile.TemporaryDirectory(prefix="ambrosia-connectors-") as tmp:
        s = Sample(Path(tmp))
        try:
            s.append(1, lines)
            say(f"starting the file sink on 127.0.0.1:{s.sink_port}")
            s.start_sink()
            say(f"starting the coordinator on 127.0.0.1:{s.port}: "
                f"{s.start_coordinator()}")
            say(f"feeding {' and '.join(f'{n}.log' for n in STREAMS)} ({lines} lines each)")
            s.start_feed()
            s.wait_committed(lines)
            say(f"committed lines 1..{lines} of each file; kill -9 the coordinator")
            assert s.coord is not None
            s.coord.kill()
            s.append(lines + 1, 2 * lines)
            say(f"appended lines up to {2 * lines} while it was down; restarting it: "
                f"{s.start_coordinator()}")
            s.wait_committed(2 * lines)
            say(f"committed lines up to {2 * lines}; kill -9 the sink")
            s.kill_sink()
            s.append(2 * lines + 1, 3 * lines)
            say(f"appended lines up to {3 * lines}; restarting the sink")
            s.start_sink()
            s.wait_committed(3 * lines)
        except (TimeoutError, ChildError) as e:
            say(f"FAILED: {e}")
            for log in sorted(Path(tmp).glob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}")
            return 1
        finally:
            s.close()
        got = s.committed()
        want = {n: numbered(n, 1, 3 * lines).splitlines(keepends=True) for n in STREAMS}
        total = sum(len(v) for v in want.values())
        if got == want:
            say(f"{len(STREAMS)} streams, {total} lines, each committed exactly once, in "
                f"order, through kill -9 of the coordinator and of the sink")
            return 0
        dups = {n: len(v) - len(set(v)) for n, v in got.items()}
        say(f"FAILED: committed {sum(len(v) for v in got.values())} of {total} lines "
            f"({', '.join(f'{n}: {len(v)}' for n, v in got.items())}; duplicates {dups})")
        return 1


if __name__ == "__main__":
    try:
        count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    except ValueError:
        count = 0
    if count < 1:
        print("connectors: error: LINES must be a whole number of at least 1", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(count))
