"""Staged records as a Spark DataFrame, read by the executors.

A job marked ``@spark_job(name, records=True)`` is given the records of its batch: its
arguments name staged blocks (``ambrosia_services.staging``: a ``staging`` root and ``refs``), and
``staged_records`` turns them into a DataFrame of one string column, ``value``, one row per
record, in order. The driver only plans: the blocks are cut into runs of about
``PARTITION_BYTES`` (a block is never split), one partition each, and the executors read
them, checking each block (a missing segment or a damaged block fails the job with one
line naming it). No record passes through the driver, so the segment root must be a path
the executors see (a shared one on a cluster).

Two readers give the same rows:

- ``jvm``: the ``ambrosia-staged`` Spark source (``jar.py``; a Connect server started by
  ``ConnectServer`` has it), which reads the blocks in the executors' JVM;
- ``python``: ``spark.range`` with one row per run and ``mapInArrow``, which reads them
  in Python workers and hands Spark Arrow batches built over each block's own buffers.

The default is the JVM source when the server has it (asked of the server, once per
call), else Python. Measured on 2 cores (Connect, local[2]; a word count of 75,000 lines
in a fresh session, as a runner runs each attempt): see the README of
``services/ambrosia_services/jobs``.
The Python reader pays for a Python worker in every new session (Spark keys its workers
by the session's artifacts) and for moving the rows from Python to the JVM.

Records that are not valid UTF-8 are decoded with replacement characters, as
``bytes.decode("utf-8", "replace")`` does (both readers; a test holds them to it).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa

from ambrosia_services.staging import Ref, read_block

from .jar import SOURCE_NAME

__all__ = ["PARTITION_BYTES", "READERS", "jvm_source_available", "plan_partitions",
           "staged_records"]

READERS: Final = ("jvm", "python")

PARTITION_BYTES: Final = 8 << 20  # payload bytes an executor task reads, about


def plan_partitions(refs: Sequence[Ref], partition_bytes: int) -> list[list[Ref]]:
    """Consecutive runs of blocks of about ``partition_bytes`` each (a block is never
    split; no run is empty), in order."""
    parts: list[list[Ref]] = []
    size = 0
    for ref in refs:
        if not parts or (size + ref.size > partition_bytes and parts[-1]):
            parts.append([])
            size = 0
        parts[-1].append(ref)
        size += ref.size
    return parts


def _strings(offsets: memoryview, data: memoryview, count: int) -> pa.Array:
    """The block's records as an Arrow string array, over its own buffers when they are
    valid UTF-8."""
    array = pa.Array.from_buffers(pa.string(), count,
                                  [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        ends = offsets.cast("I")
        array = pa.array([bytes(data[ends[i]:ends[i + 1]]).decode("utf-8", "replace")
                          for i in range(count)], pa.string())
    return array


def _read_runs(root: str, runs: list[list[list[Any]]],
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """On an executor: the records of the runs whose numbers the rows hold."""
    for batch in batches:
        for number in batch.column(0).to_pylist():
            for fields in runs[number]:
                block = read_block(root, Ref.from_list(fields))
                yield pa.RecordBatch.from_arrays(
                    [_strings(block.offsets, block.data, block.ref.count)], names=["value"])


def jvm_source_available(spark: Any, name: str = SOURCE_NAME) -> bool:
    """Whether the Connect server behind ``spark`` has the ``ambrosia-staged`` source
    (or the one ``name`` names)."""
    from pyspark.errors import PySparkException

    try:
        _ = spark.read.format(name).option("root", ".").load().schema
    except PySparkException as err:  # measured: an UnknownException, not an AnalysisException
        if "DATA_SOURCE_NOT_FOUND" in str(err):
            return False
        raise
    return True


def _ref_line(ref: Ref) -> str:
    """One line of the JVM source's ``refs`` option (see ``java/.../StagedSource.java``)."""
    return (f"{ref.segment} {ref.offset} {ref.length} {ref.check} {ref.stream_id} "
            f"{ref.first_id} {ref.last_id} {ref.count} {ref.size}")


def staged_records(spark: Any, args: dict[str, Any],
                   partition_bytes: int = PARTITION_BYTES, reader: str | None = None) -> Any:
    """The DataFrame (``value string``) of the records ``args`` names: ``staging`` (the
    root) and ``refs`` (``Ref.to_list()`` of each block, in order). ``reader`` (else
    ``args["reader"]``) is one of ``READERS``, or None for the JVM source when the server
    has it.

    Raises:
        ValueError: an unknown ``reader``.
    """
    reader = reader or args.get("reader")
    if reader is not None and reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, not {reader!r}")
    refs = [Ref.from_list(r) for r in args["refs"]]
    if not refs:
        return spark.createDataFrame([], "value string")
    if reader is None:
        reader = "jvm" if jvm_source_available(spark) else "python"
    if reader == "jvm":
        return (spark.read.format(SOURCE_NAME)
                .option("root", str(args["staging"]))
                .option("refs", "\n".join(map(_ref_line, refs)))
                .option("partitionBytes", str(partition_bytes))
                .load())
    runs = [[r.to_list() for r in run] for run in plan_partitions(refs, partition_bytes)]
    read = functools.partial(_read_runs, str(args["staging"]), runs)
    return spark.range(0, len(runs), 1, len(runs)).mapInArrow(read, "value string")
