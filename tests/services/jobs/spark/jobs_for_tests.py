"""Job functions the Spark tests run in real runners (``--jobs`` names this module)."""

from __future__ import annotations

from typing import Any

from ambrosia_services.jobs.spark import spark_job


@spark_job("wordcount")
def wordcount(spark: Any, args: dict[str, Any]) -> Any:
    """Words of a text file (whitespace-separated) and how often each occurs."""
    from pyspark.sql import functions as sf

    lines = spark.read.text(args["input"])
    words = lines.select(sf.explode(sf.split(sf.col("value"), r"\s+")).alias("word"))
    return words.where(sf.col("word") != "").groupBy("word").count()


@spark_job("sleepy")
def sleepy(spark: Any, args: dict[str, Any]) -> Any:
    """``rows`` rows over two partitions, each row taking ``sleep_ms`` in the JVM: a job
    that runs long enough to be cancelled or to lose its runner mid-way."""
    ms = int(args.get("sleep_ms", 500))
    frame = spark.range(0, int(args.get("rows", 8)), 1, 2)
    return frame.selectExpr("id", f"java_method('java.lang.Thread', 'sleep', {ms}L) AS slept")


@spark_job("staged_words", records=True)
def staged_words(spark: Any, records: Any, args: dict[str, Any]) -> Any:
    """The ``wordcount`` above, over the batch's staged records (read by the executors)."""
    from pyspark.sql import functions as sf

    words = records.select(sf.explode(sf.split(sf.col("value"), r"\s+")).alias("word"))
    return words.where(sf.col("word") != "").groupBy("word").count()
