"""Staged records as a Spark DataFrame, read by the executors.

A job marked ``@spark_job(name, records=True)`` is given the records of its batch: its
arguments name staged blocks (``services.staging``: a ``staging`` root and ``refs``), and
``staged_records`` turns them into a DataFrame of one string column, ``value``, one row per
record, through a Python data source (``ambrosia_staged``). The driver only plans: each
partition is a run of blocks, which an executor reads from the segment files, checks
(``read_block``: a missing segment or a damaged block fails the job with one line naming
it) and hands to Spark as Arrow batches built over the block's own offsets and bytes. So
the segment root must be a path the executors see (a shared one on a cluster).

Records that are not valid UTF-8 are decoded with replacement characters, as
``bytes.decode("utf-8", "replace")`` does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from services.staging import Ref, read_block

__all__ = ["PARTITION_BYTES", "SOURCE_NAME", "StagedSource", "plan_partitions",
           "staged_records"]

SOURCE_NAME: Final = "ambrosia_staged"
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


class _Blocks(InputPartition):
    def __init__(self, root: str, refs: list[list[Any]]) -> None:
        super().__init__(None)
        self.root = root
        self.refs = refs


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


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.root = options["root"]
        self.refs = [Ref.from_list(r) for r in json.loads(options["refs"])]
        self.partition_bytes = int(options.get("partition_bytes", PARTITION_BYTES))

    def partitions(self) -> list[_Blocks]:
        return [_Blocks(self.root, [r.to_list() for r in part])
                for part in plan_partitions(self.refs, self.partition_bytes)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Blocks)
        for fields in partition.refs:
            block = read_block(partition.root, Ref.from_list(fields))
            yield pa.RecordBatch.from_arrays(
                [_strings(block.offsets, block.data, block.ref.count)], names=["value"])


class StagedSource(DataSource):
    """``spark.read.format("ambrosia_staged").option("root", R).option("refs", JSON)``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return "value string"

    def reader(self, schema: Any) -> _Reader:
        return _Reader(self.options)


def staged_records(spark: Any, args: dict[str, Any],
                   partition_bytes: int = PARTITION_BYTES) -> Any:
    """The DataFrame (``value string``) of the records ``args`` names: ``staging`` (the
    root) and ``refs`` (``Ref.to_list()`` of each block, in order)."""
    spark.dataSource.register(StagedSource)
    return (spark.read.format(SOURCE_NAME)
            .option("root", str(args["staging"]))
            .option("refs", json.dumps(args["refs"]))
            .option("partition_bytes", str(partition_bytes))
            .load())
