"""The pipeline's Spark jobs; runners load them with ``--jobs ambrosia_services.pipeline.jobs``.

pyspark is imported inside the job functions only, so the coordinator (which imports
this package) never loads Spark's client.
"""

from __future__ import annotations

from typing import Any

from ambrosia_services.jobs.spark import spark_job

from .words import LOWER, SEPARATOR, UPPER

__all__ = ["wordcount"]


@spark_job("wordcount", records=True)
def wordcount(spark: Any, lines: Any, args: dict[str, Any]) -> Any:
    """Word counts (``word``, ``count``) of the batch's lines (its staged records, read by
    the executors), by ``words.words``'s rule: ``translate`` lowers A-Z exactly as the
    Python rule does, then split on non-letters."""
    from pyspark.sql import functions as sf

    # A micro-batch is small: Spark's 200 shuffle partitions would cost more than the
    # count (measured: bench/README.md).
    spark.conf.set("spark.sql.shuffle.partitions", str(args.get("partitions", 4)))
    lowered = sf.translate(sf.col("value"), UPPER, LOWER)
    found = lines.select(sf.explode(sf.split(lowered, SEPARATOR)).alias("word"))
    return found.where(sf.col("word") != "").groupBy("word").count()
