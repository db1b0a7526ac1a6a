"""A job runner: a long-lived process that runs the coordinator's Spark jobs.

It speaks the job protocol as a *participant* over TCP (a thin asyncio transport around
the sans-IO ``JobConnection`` and ``ParticipantJobs``) and runs jobs on a Spark Connect
server::

    python -m ambrosia_services.jobs.runner --listen 127.0.0.1:P --connect sc://127.0.0.1:Q \
        --jobs MODULE[,MODULE] --instance-name NAME --dir DIR

- ``start``: the plan's job key and attempt name everything Spark sees
  (``attempts.Attempt``); the job runs in a worker thread in a session of its own, writes
  to the attempt's staging directory and is committed by rename; then the committed output
  streams back to the initiator as ordered ``batch``es on the result edge (JSON lines, cut
  at line ends where a line fits a batch), the last one flagged, within the byte credit
  the initiator grants. A start of an attempt whose staging is partial (a runner died
  mid-write) re-attaches to the write while Connect says it runs, then commits it; else
  the start is refused (``ATTEMPT_REUSED``) and the initiator decides a new attempt.
- ``cancel`` (or a ``check_response`` that releases the job): ``interruptTag`` in the
  attempt's session; nothing is committed after it.
- on every connection from an initiator: a ``check`` with the jobs held for it; its
  ``check_response`` lists the active ones, whose committed output is streamed again
  from batch 0 on the new connection (a new primary must see all of it).
- a job that fails is reported by a cancel request (``RunnerCancelCode``).

Batches an initiator sends to a job are consumed at once (no job takes streamed input
yet): each is answered by a credit grant, which is how a peer sees it was delivered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from ambrosia_core.addresses import Address, address_argument
from ambrosia_core.errors import AddressError, UsageError
from ambrosia_core.metrics import Families, MetricsError, Source, add_metrics_option
from ambrosia_core.metrics import serve as serve_metrics
from ambrosia_core.tls import add_tls_options, tls_from_args

from .attempts import member_id
from .errors import JobDefinitionError
from .runner_results import result_chunks
from .runner_server import Runner
from .spark.registry import JobRegistry

__all__ = ["Runner", "main", "result_chunks", "runner_source"]

log = logging.getLogger("ambrosia_services.jobs.runner")

# Spark's client (pyspark with Connect, pandas, pyarrow) comes with this extra; the module
# loads it on a job's first use (``spark.execute``), ``main`` before it listens.
SPARK_EXTRA = "pip install 'ambrosia-py[spark]'"


def runner_source(runner: Runner, member: str) -> Source:
    """The runner's metrics, read from its counters at scrape time (on the exposition
    server's thread)."""
    def read(f: Families) -> None:
        name = {"member": member}
        f.counter("ambrosia_runner_jobs_started", "Jobs launched on Spark", runner.started,
                  **name)
        for outcome, n in dict(runner.ended).items():
            f.counter("ambrosia_runner_jobs_ended", "Job runs ended: output committed, "
                      "failed, or cancelled", n, outcome=outcome, **name)
            f.histogram("ambrosia_runner_job_duration_seconds", "From a job's launch to the "
                        "end of its run on Spark", runner.durations[outcome], outcome=outcome,
                        **name)
        jobs = list(runner._running.values())
        f.gauge("ambrosia_runner_jobs_running", "Jobs launched and not yet committed, "
                "failed or cancelled", sum(not job.committed for job in jobs), **name)
        f.gauge("ambrosia_runner_jobs_held", "Jobs this runner holds (running, or their "
                "committed output being streamed)", len(jobs), **name)
        f.gauge("ambrosia_runner_connections", "Initiators connected", runner._connections,
                **name)
    return read


async def _serve(args: argparse.Namespace, registry: JobRegistry) -> bool:
    runner = Runner(member_id(args.instance_name), registry, args.connect, args.dir,
                    workers=args.workers, tls=args.tls)
    metrics = serve_metrics(args.metrics, [runner_source(runner, args.instance_name)])
    try:
        return await _run(runner, args, registry)
    finally:
        if metrics is not None:
            metrics.close()


async def _run(runner: Runner, args: argparse.Namespace, registry: JobRegistry) -> bool:
    # Asked before the line that says it listens, so that a stop sent on that line is
    # an ordinary stop too: one line, exit 0.
    stop = asyncio.Event()
    asked: list[str] = []

    def on_signal(name: str) -> None:
        asked.append(name)
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum.name)
    host = args.listen.host
    port = await runner.listen(host, args.listen.port)
    print(f"runner {args.instance_name} ({runner.member}) listening on {Address(host, port)}"
          f"{' over TLS' if args.tls is not None else ''}; jobs: "
          f"{', '.join(registry.names())}", flush=True)
    watch = asyncio.ensure_future(_watch_connect(args.connect))
    await stop.wait()
    log.info("stopping (%s)", asked[0])
    watch.cancel()
    busy = runner.busy()
    await runner.close()
    return busy


CONNECT_CHECK_SECONDS = 30.0  # how often an unreachable Spark Connect is tried again


async def _watch_connect(url: str) -> None:
    """Says at start, and whenever it changes, whether Spark Connect can be reached: a
    runner cut off from Spark takes jobs that cannot run (the pyspark client retries for
    minutes), and a silent one looked hung."""
    where = url.removeprefix("sc://").split("/", 1)[0].split(";", 1)[0]
    try:
        address = Address.parse(where, what="")
    except AddressError:
        log.warning("cannot tell where Spark Connect is from %s; not checked", url)
        return
    reachable: bool | None = None
    while True:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(address.host, address.port), 5)
            writer.close()
            now, why = True, ""
        except (OSError, TimeoutError) as err:
            now, why = False, (os.strerror(err.errno) if isinstance(err, OSError)
                               and err.errno else type(err).__name__)
        if now != reachable:
            if now:
                log.info("Spark Connect at %s is reachable", address)
            else:
                log.warning("cannot reach Spark Connect at %s (%s): jobs wait for it, "
                            "and the coordinator's job_timeout_seconds ends those that wait "
                            "too long; tried again every %g s", address, why,
                            CONNECT_CHECK_SECONDS)
            reachable = now
        await asyncio.sleep(CONNECT_CHECK_SECONDS)


PROG = "python -m ambrosia_services.jobs.runner"


def _refused(err: Exception | str) -> int:
    """A refusal, as every command says one: one line after the command's name, exit 1
    (2 stays argparse's, for arguments it cannot parse)."""
    print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
    return 1


def _missing_spark_client() -> str | None:
    """What of Spark's client cannot be imported ("pyspark", "Pandas >= 2.2.0"), or None:
    it is loaded here, once, so that a runner without the ``spark`` extra says so in one
    line. pyspark names a missing or old dependency of its own in a ``PySparkImportError``
    (PACKAGE_NOT_INSTALLED, with the package and its least version)."""
    try:
        from .spark import execute  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name is None or err.name.startswith("ambrosia_"):
            raise  # one of ours: a bug, not a missing extra
        return err.name.split(".")[0]
    except ImportError as err:
        said = getattr(err, "getMessageParameters", lambda: None)() or {}
        package = said.get("package_name")
        if not package:
            raise
        least = said.get("minimum_version")
        return f"{package} >= {least}" if least else str(package)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG,
                                     description="Run Spark jobs for a job protocol initiator.")
    parser.add_argument("--listen", required=True,
                        type=address_argument(allow_port_zero=True, default_host="127.0.0.1"),
                        help="HOST:PORT (:PORT for 127.0.0.1; port 0 picks one)")
    parser.add_argument("--connect", required=True, help="Spark Connect URL sc://host:port")
    parser.add_argument("--jobs", required=True, help="MODULE[,MODULE] with @spark_job functions")
    parser.add_argument("--instance-name", required=True,
                        help="this runner's name (its member id in the job protocol derives "
                             "from it)")
    parser.add_argument("--dir", required=True,
                        help="the output root directory (its attempts' staging and final "
                             "directories)")
    parser.add_argument("--workers", type=int, default=4,
                        help="jobs that may run at once; more wait for one to end "
                             "(default 4)")
    add_metrics_option(parser, what="the runner's")
    add_tls_options(parser)
    args = parser.parse_args(argv)
    missing = _missing_spark_client()
    if missing is not None:
        return _refused(f"the job runner needs {missing}, part of Spark's client: "
                        f"{SPARK_EXTRA}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        options = tls_from_args(args)
        options.check_listen(args.listen.host, "the runner", log.warning)
        args.tls = options.load()
    except UsageError as err:
        return _refused(err)
    os.environ.pop("MASTER", None)  # PySpark reads it, and .remote() then fails
    try:
        registry = JobRegistry.from_modules(m for m in args.jobs.split(",") if m)
    except JobDefinitionError as err:
        return _refused(err)
    try:
        busy = asyncio.run(_serve(args, registry))
    except MetricsError as err:
        return _refused(err)
    if busy:
        # Jobs still running belong to the Connect server now; waiting for their threads
        # (or for SparkSession.__del__) could hang the exit.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
