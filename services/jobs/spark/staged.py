"""Staged records as a Spark DataFrame, read by the executors.

A job marked ``@spark_job(name, records=True)`` is given the records of its batch: its
arguments name staged blocks (``services.staging``: a ``staging`` root and ``refs``), and
``staged_records`` turns them into a DataFrame of one string column, ``value``, one row per
record. The driver only plans: the blocks are cut into runs of about ``PARTITION_BYTES``,
one partition each (``spark.range`` with as many partitions), and ``mapInArrow`` reads
them on the executors: each run's blocks are read from their segment files, checked
(``read_block``: a missing segment or a damaged block fails the job with one line naming
it) and handed to Spark as Arrow batches built over each block's own offsets and bytes.
No record passes through the driver, so the segment root must be a path the executors
see (a shared one on a cluster).

Measured on 2 cores (Connect, local[2], warm; a word count of 600,000 lines): 2.2 s from
staged segments, 1.1 s with ``spark.read.text`` of a plain file, 4.6 s with
``createDataFrame`` of the lines on the driver. A Python data source over the same blocks
took 2.3 times as long as this reader for 75,000 lines (its planning runs Python on the
server for every query).

Records that are not valid UTF-8 are decoded with replacement characters, as
``bytes.decode("utf-8", "replace")`` does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa

from services.staging import Ref, read_block

__all__ = ["PARTITION_BYTES", "plan_partitions", "staged_records"]

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


def staged_records(spark: Any, args: dict[str, Any],
                   partition_bytes: int = PARTITION_BYTES) -> Any:
    """The DataFrame (``value string``) of the records ``args`` names: ``staging`` (the
    root) and ``refs`` (``Ref.to_list()`` of each block, in order)."""
    refs = [Ref.from_list(r) for r in args["refs"]]
    runs = [[r.to_list() for r in run] for run in plan_partitions(refs, partition_bytes)]
    if not runs:
        return spark.createDataFrame([], "value string")
    read = functools.partial(_read_runs, str(args["staging"]), runs)
    return spark.range(0, len(runs), 1, len(runs)).mapInArrow(read, "value string")
