"""The baseline of ``bench_pipeline``: the pipeline's word count as a Spark user would write
it with Structured Streaming, run in a child process on a classic ``local[N]`` SparkSession.

    python bench/ss_wordcount.py --source DIR --out DIR --checkpoint DIR --report FILE \
        --lines N [--max-files K] [--warm FILE ...] [--master local[2]] [--partitions 4]

- Warm-up: a plain batch word count of the ``--warm`` files (the corpus), collected, as
  the pipeline's Connect server is warmed by its reference count before it is timed.
- The query: ``spark.readStream.text(source)`` with ``maxFilesPerTrigger`` K (the source
  files hold a micro-batch's lines each), the word rule of ``ambrosia_services.pipeline.words``
  (``translate`` A-Z to a-z, split on ``SEPARATOR``, drop empty words), and
  ``foreachBatch``: the batch's ``groupBy("word").count()`` written as JSON to
  ``<out>/batch-<id>`` (mode overwrite, so a batch run again after a failure replaces its
  output: the usual idempotent foreachBatch sink), with ``checkpointLocation``. Default
  trigger: the next micro-batch starts as soon as the last one ended.
- Timing: a ``StreamingQueryListener`` records each batch's progress (id, input rows, start
  timestamp, ``triggerExecution`` duration). A batch is committed when its trigger ends (the
  commit log entry is written inside ``triggerExecution``), so its commit time is its
  start timestamp plus that duration (wall clock, millisecond resolution). The query
  stops once the batches have taken ``--lines`` input rows.

The report (JSON, wall-clock seconds since the epoch): ``start`` (just before
``writeStream.start()``), ``warm_s``, and ``batches`` (``id``, ``rows``, ``began``,
``committed``, ``trigger_ms``, ``seen``: when the listener was told).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ambrosia_services.pipeline.words import LOWER, SEPARATOR, UPPER  # noqa: E402


def _epoch(iso: str) -> float:
    """A progress timestamp (``2026-01-02T03:04:05.678Z``) in seconds since the epoch."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="the watched directory")
    parser.add_argument("--out", type=Path, required=True, help="the foreachBatch output root")
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--lines", type=int, required=True, help="stop after this many rows")
    parser.add_argument("--max-files", type=int, default=1, help="maxFilesPerTrigger")
    parser.add_argument("--warm", type=Path, nargs="*", default=[], help="warm-up input")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    # A classic session, even when started by a process that used Spark Connect (PySpark's
    # ``.remote()`` sets these, and a child inheriting them cannot start a local session).
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"):
        os.environ.pop(name, None)

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as sf
    from pyspark.sql.streaming import StreamingQueryListener

    spark = (SparkSession.builder.master(args.master).appName("bench-ss-wordcount")
             .config("spark.ui.enabled", "false")
             # As the pipeline's job sets for its micro-batches (ambrosia_services.pipeline.jobs).
             .config("spark.sql.shuffle.partitions", str(args.partitions))
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")

    def words(lines: DataFrame) -> DataFrame:
        lowered = sf.translate(sf.col("value"), UPPER, LOWER)
        found = lines.select(sf.explode(sf.split(lowered, SEPARATOR)).alias("word"))
        return found.where(sf.col("word") != "")

    warm_s = 0.0
    if args.warm:
        t = time.perf_counter()
        words(spark.read.text([str(p) for p in args.warm])).groupBy("word").count().collect()
        warm_s = time.perf_counter() - t

    batches: list[dict[str, Any]] = []
    rows_seen = 0
    progressed = threading.Condition()

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            nonlocal rows_seen
            p = event.progress
            rows = int(p.numInputRows)
            if rows == 0:
                return  # a trigger that found no new file
            began = _epoch(p.timestamp)
            trigger_ms = float(p.durationMs.get("triggerExecution", 0))
            with progressed:
                batches.append({"id": int(p.batchId), "rows": rows, "began": began,
                                "committed": began + trigger_ms / 1e3,
                                "trigger_ms": trigger_ms, "seen": time.time()})
                rows_seen += rows
                progressed.notify_all()

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            with progressed:
                progressed.notify_all()

    def write_counts(batch: DataFrame, batch_id: int) -> None:
        batch.groupBy("word").count().write.mode("overwrite").json(
            str(args.out / f"batch-{batch_id:06d}"))

    spark.streams.addListener(Progress())
    stream = spark.readStream.option("maxFilesPerTrigger", args.max_files).text(str(args.source))
    start = time.time()
    query = (words(stream).writeStream.foreachBatch(write_counts)
             .option("checkpointLocation", str(args.checkpoint)).start())
    print("query started", flush=True)  # the parent may begin feeding files
    deadline = time.monotonic() + args.timeout
    try:
        with progressed:
            while rows_seen < args.lines:
                if not query.isActive:
                    raise RuntimeError(f"the query ended: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"timed out with {rows_seen} of {args.lines} rows")
                progressed.wait(0.2)
    finally:
        query.stop()
        args.report.write_text(json.dumps({"start": start, "warm_s": warm_s,
                                           "batches": sorted(batches, key=lambda b: b["id"])}))
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
