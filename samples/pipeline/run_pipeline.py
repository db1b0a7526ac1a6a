"""`make demo`: a word count pipeline through crashes, checked exactly.

Source feeds -> the pipeline coordinator (an immortal) -> PySpark word counts per
micro-batch on job runners (Spark Connect) -> a 2PC file sink. Part-way the coordinator's
binding, then its coordinator process, then a runner are killed with kill -9 and restarted,
and between two crashes the coordinator is upgraded live to its next version. At the end the
committed output is checked against a plain PySpark count of the corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from ambrosia_core.ports import free_ports  # noqa: E402
from samples.pipeline.corpus import count_words, write_corpus  # noqa: E402
from samples.pipeline.drip import Drip  # noqa: E402
from samples.pipeline.output import OutputTail, check_output, parse_output  # noqa: E402
from samples.pipeline.pgoutput import TABLE, PgOutputTail, committed_bytes, sink_name  # noqa: E402
from samples.pipeline.procs import (  # noqa: E402
    Child,
    ChildError,
    children_of,
    interrupt_between_starts,
)
from samples.pipeline.watch import Watcher  # noqa: E402

PIPELINE = "wordcount"  # ambrosia_services.pipeline:WordCountPipeline
# Whole lines per message, up to this many bytes: a message per line costs the feed and
# the coordinator's listener far more than the bytes do.
MESSAGE_BYTES = 16 * 1024
JOBS = "ambrosia_services.pipeline.jobs"
NAME = "wordcount"
# When to crash, as the share of the corpus's lines committed: the binding, then the
# coordinator process, then a runner.
KILL_AT = (0.2, 0.45, 0.7)
# When to upgrade the coordinator live to its next version, and to which class.
UPGRADE_AT = 0.58
NEXT = "samples.pipeline.next_version:WordCountPipelineV1"
UPGRADED = "upgraded to WordCountPipelineV1 version 1 (live)"


def say(text: str) -> None:
    print(f"pipeline: {text}", flush=True)


def free_port() -> int:
    """A free port on 127.0.0.1, below the ephemeral range (see ``ambrosia_core.ports``)."""
    return free_ports(1)[0]


class Pipeline:
    """Every process of one run, in ``run_dir``. Each runner runs one job at a time:
    local[2] has two cores, and batches that run side by side only finish together."""

    def __init__(self, run_dir: Path, paths: list[Path], connect: str, runners: int,
                 batch_lines: int, postgres: str | None = None) -> None:
        # The feeds tail these; the demo appends the corpus to them as the run goes on.
        self.run_dir = run_dir
        self.home = run_dir / "ambrosia-home"
        self.logs = run_dir / "logs"
        self.sink_dir = run_dir / "sink"
        self.status_file = run_dir / "status.json"
        self.listen, sink_port, *runner_ports = free_ports(2 + runners)  # all distinct
        self.postgres = postgres
        self.sink_name = sink_name(run_dir.name)
        if postgres is None:
            self.sink = Child("sink", ["-m", "ambrosia_services.connectors.clients.filesink",
                                       "--listen", f"127.0.0.1:{sink_port}",
                                       "--dir", str(self.sink_dir)],
                              self.logs / "sink.log")
        else:
            # The same 2PC conversation; each batch's counts become rows of the
            # "wordcount" table (and its headers of "wordcount_batches") in one prepared
            # PostgreSQL transaction.
            self.sink = Child("sink", ["-m", "ambrosia_services.connectors.clients.pgsink",
                                       "--listen", f"127.0.0.1:{sink_port}", "--dsn", postgres,
                                       "--table", TABLE, "--format", "wordcount",
                                       "--instance-name", self.sink_name],
                              self.logs / "sink.log")
        self.runners = [
            Child(f"runner-{i + 1}", [
                "-m", "ambrosia_services.jobs.runner", "--listen", f"127.0.0.1:{port}",
                "--connect", connect, "--jobs", JOBS, "--instance-name", f"runner-{i + 1}",
                "--dir", str(run_dir / "jobs"), "--workers", "1"],
                  self.logs / f"runner-{i + 1}.log")
            for i, port in enumerate(runner_ports)]
        config = run_dir / "pipeline.toml"
        config.write_text("\n".join([
            f'listen = "127.0.0.1:{self.listen}"',
            f'status_file = "{self.status_file}"',
            "status_seconds = 0.5",
            "interval_seconds = 0.2",
            # "name@host:port": the member name each runner was started with.
            "runners = [" + ", ".join(f'"{r.name}@127.0.0.1:{port}"' for r, port
                                      in zip(self.runners, runner_ports, strict=True)) + "]",
            f'out = "{run_dir / "jobs"}"',
            f"batch_lines = {batch_lines}",
            "batch_seconds = 1.0",
            "[sinks]",
            f'out = "127.0.0.1:{sink_port}"', ""]))
        self.coordinator = Child(
            "coordinator", ["-m", "ambrosia_cli", "--home", str(self.home), "run", PIPELINE,
                            "-i", NAME, "--config", str(config)],
            self.logs / "coordinator.log")
        self.fed = [run_dir / "fed" / p.name for p in paths]
        self.feeds = [
            Child(f"feed-{i + 1}", ["-m", "ambrosia_services.connectors.clients.feed", "--connect",
                                    f"127.0.0.1:{self.listen}",
                                    "--message-bytes", str(MESSAGE_BYTES),
                                    "--instance-name", f"feed-{i + 1}", str(p)],
                  self.logs / f"feed-{i + 1}.log")
            for i, p in enumerate(self.fed)]

    def output_tail(self) -> OutputTail | PgOutputTail:
        """What the watcher follows: the committed file, or the table's batch headers."""
        if self.postgres is None:
            return OutputTail(self.sink_dir / "committed")
        return PgOutputTail(self.postgres, self.sink_name)

    def committed(self) -> bytes:
        """The committed output: the file, or the tables read back as its bytes."""
        if self.postgres is None:
            return (self.sink_dir / "committed").read_bytes()
        return committed_bytes(self.postgres, self.sink_name)

    def output_place(self) -> str:
        if self.postgres is None:
            return str(self.sink_dir / "committed")
        return (f"tables {TABLE} and {TABLE}_batches, sink = '{self.sink_name}' (see "
                "samples/pipeline/README.md for queries)")

    def everything(self) -> list[Child]:
        return [*self.feeds, self.coordinator, *self.runners, self.sink]

    def start_coordinator(self) -> None:
        self.coordinator.start()
        self.coordinator.wait_for("became primary", timeout=120)

    def coordinator_process(self) -> int:
        """The pid of the coordinator that ``ambrosia run`` started beside the immortal."""
        for pid in children_of(self.coordinator.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ambrosia_ic" in cmdline:
                return pid
        raise ChildError("ambrosia run has no coordinator process")

    def stop(self) -> None:
        for child in self.everything():
            child.stop()


def crashes(p: Pipeline, w: Watcher) -> list[tuple[float, Callable[[], None]]]:
    """The crash plan: (share of lines committed, what to do)."""

    def binding() -> None:
        say(f"kill -9 the coordinator's binding (ambrosia run, pid {p.coordinator.pid})")
        w.mark("kill -9 binding", "down")
        p.coordinator.kill9()
        say("restarting ambrosia run: it recovers from its checkpoint and log")
        p.start_coordinator()
        w.mark("binding recovered", "up")

    def coordinator() -> None:
        pid = p.coordinator_process()
        say(f"kill -9 the coordinator process (pid {pid}); ambrosia run then stops")
        w.mark("kill -9 coordinator", "down")
        os.kill(pid, signal.SIGKILL)
        if p.coordinator.wait(30) is None:
            raise ChildError("ambrosia run did not stop after its coordinator was killed")
        say("restarting ambrosia run: its coordinator recovers the log")
        p.start_coordinator()
        w.mark("coordinator recovered", "up")

    def runner() -> None:
        r = p.runners[0]
        say(f"kill -9 {r.name} (pid {r.pid}) and start it again")
        w.mark(f"kill -9 {r.name}")
        r.kill9()
        r.start()
        r.wait_for("listening on")

    return list(zip(KILL_AT, (binding, coordinator, runner), strict=True))


def upgrade(p: Pipeline, w: Watcher) -> tuple[float, Callable[[], None]]:
    """The live upgrade: stop ``ambrosia run`` (an ordinary stop, with batches and jobs in
    flight) and start it again with ``--upgrade-to`` the next version, which takes the
    whole state and goes on; every later start names the upgrade too (a no-op once done)."""

    def switch() -> None:
        say(f"live upgrade: stopping ambrosia run (pid {p.coordinator.pid}) and starting it "
            f"again with --upgrade-to {NEXT}")
        w.mark("stop, upgrade to v1", "down")
        p.coordinator.stop()
        p.coordinator.args += ["--upgrade-to", NEXT]
        p.start_coordinator()
        p.coordinator.wait_for(UPGRADED)
        say("the coordinator runs version 1 now, from the state version 0 left")
        w.mark("v1 running", "up")

    return UPGRADE_AT, switch


def upgraded(p: Pipeline) -> str | None:
    """Why the run does not show the live upgrade through to its end, or None: the
    coordinator said it switched, and its last status came from version 1's code."""
    if UPGRADED not in p.coordinator.log.read_text(errors="replace"):
        return "the coordinator never said it was upgraded live"
    try:
        version = json.loads(p.status_file.read_text()).get("code_version")
    except (OSError, ValueError):
        version = None
    if version != 1:
        return f"the last status came from code version {version}, not the upgraded 1"
    return None


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.dir or tempfile.mkdtemp(prefix="ambrosia-pipeline-")).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = write_corpus(run_dir / "corpus", args.lines, args.files)
    size = sum(p.stat().st_size for p in paths)
    say(f"corpus: {args.lines:,} lines, {size / 1e6:.1f} MB in {len(paths)} files under "
        f"{run_dir / 'corpus'}")
    server = None
    connect = args.connect
    if connect is None:
        from ambrosia_services.jobs.spark import ConnectServer

        server = ConnectServer(free_port(), master="local[2]", log_dir=run_dir / "logs")
        say("starting a Spark Connect server (local[2]) ...")
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        connect = server.url
    batch_lines = args.batch_lines or max(200, args.lines // 20)
    p: Pipeline | None = None
    try:
        # The reference answer first: it also warms the Spark server up.
        say("counting the corpus with a plain PySpark batch job (the reference answer)")
        from samples.pipeline.recount import spark_recount

        expected = spark_recount(connect, paths)
        p = Pipeline(run_dir, paths, connect, args.runners, batch_lines, args.postgres)
        w = Watcher(p.status_file, p.output_tail(), args.lines, say)
        kind = "file" if args.postgres is None else "PostgreSQL"
        say(f"Spark at {connect}; starting the 2PC {kind} sink, {args.runners} runner(s) and "
            f"the coordinator ({NAME}, micro-batches of {batch_lines} lines)")
        for child in (p.sink, *p.runners):
            child.start()
        for child in (p.sink, *p.runners):
            child.wait_for("listening on")
        p.start_coordinator()
        say(f"while it runs: ambrosia --home {p.home} status -i {NAME}")
        w.sources_started()
        drip = Drip(paths, p.fed)
        for feed in p.feeds:
            feed.start()
        say(f"feeding the corpus a piece at a time, through the crashes, from {p.fed[0].parent}")
        plan = [] if args.no_crashes else crashes(p, w)
        if not args.no_upgrade:
            plan = sorted([*plan, upgrade(p, w)], key=lambda step: step[0])
        deadline = time.monotonic() + args.timeout
        timed_out = False
        committed_before = 0
        while True:
            w.poll()
            drip.poll(w.applied_lines)
            # The next crash once its share of the lines is committed and a batch has been
            # committed since the last recovery; the crashes still due when everything is
            # committed happen then, and the recovered pipeline must not change a byte.
            done = w.tail.lines >= args.lines
            if plan and (done or (w.tail.lines >= plan[0][0] * args.lines
                                  and len(w.tail.headers) > committed_before)):
                plan.pop(0)[1]()
                committed_before = len(w.tail.headers)
                continue
            for child in p.everything():
                if child in p.feeds:
                    continue
                if not child.alive():
                    raise ChildError(f"{child.name} ended: {child.last_line()} "
                                     f"(log {child.log})")
            failed = [f for f in p.feeds if not f.alive() and f.wait(0) != 0]
            if failed:
                raise ChildError(f"{failed[0].name} failed: {failed[0].last_line()}")
            if done and not plan and drip.done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.25)
        w.settle(len(w.tail.headers))
        for line in w.progress():
            say(line)
        say("stopping the pipeline")
        p.stop()
    finally:
        if p is not None:
            p.stop()
        if server is not None:
            server.stop()
    if expected != count_words(paths):
        say("warning: PySpark's recount differs from Python's own count of the corpus")
    batches, problems = parse_output(p.committed())
    if timed_out:
        problems.append(f"timed out after {args.timeout:g} s")
    through = []
    if not args.no_crashes:
        through.append(f"{len(KILL_AT)} kill -9 crashes")
    if not args.no_upgrade:
        why = upgraded(p)
        if why is not None:
            problems.append(why)
        through.append("a live upgrade to version 1")
    verdict = check_output(batches, problems, expected, args.lines, " and ".join(through))
    from samples.pipeline.plot import plot_or_say

    plotted = plot_or_say(run_dir / "pipeline.png", w.samples, w.commit_latencies(),
                          w.events, f"{NAME}: {args.lines:,} lines, {len(batches)} batches")
    say(f"committed output: {p.output_place()}")
    say(plotted)
    say(verdict.line)
    return 0 if verdict.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run_pipeline.py", description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=60_000,
                        help="lines in the generated corpus (default 60,000: about 3.5 MB)")
    parser.add_argument("--small", action="store_true",
                        help="a small run: 6,000 lines in 2 files, batches of 750")
    parser.add_argument("--files", type=int, default=3, help="corpus files, one feed each")
    parser.add_argument("--runners", type=int, default=2, help="job runners (1 or more)")
    parser.add_argument("--batch-lines", type=int, default=0,
                        help="micro-batch size (default: a twentieth of the corpus)")
    parser.add_argument("--connect", default=None, metavar="sc://HOST:PORT",
                        help="use this Spark Connect server instead of starting one")
    parser.add_argument("--dir", default=None,
                        help="run directory (default: a new one under the temp directory)")
    parser.add_argument("--postgres", default=None, metavar="DSN",
                        help="commit the counts to this PostgreSQL database (libpq DSN or "
                             "URL; it needs max_prepared_transactions above 0) with "
                             "ambrosia-pgsink instead of the file sink")
    parser.add_argument("--no-crashes", action="store_true", help="kill nothing")
    parser.add_argument("--no-upgrade", action="store_true",
                        help="do not upgrade the coordinator live part-way")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="give up after this many seconds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.small:
        args.lines, args.files = 6000, 2
        args.batch_lines = args.batch_lines or 750
    if args.lines < 100 or args.files < 2 or args.runners < 1:
        print("pipeline: error: --lines must be at least 100, --files at least 2, "
              "--runners at least 1", file=sys.stderr)
        return 2
    interrupt_between_starts()
    try:
        return run(args)
    except ChildError as err:
        say(f"FAILED: {err}")
        return 1
    except KeyboardInterrupt:  # Ctrl-C: run()'s own cleanup has stopped every process
        say("interrupted: every process of the run was stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
