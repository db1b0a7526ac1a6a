"""The reference answer: a plain PySpark word count of the whole corpus in one batch job,
on the same Spark Connect server, with none of the pipeline's machinery."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

__all__ = ["spark_recount"]


def spark_recount(url: str, paths: list[Path]) -> Counter[str]:
    """Word counts of ``paths`` by the pipeline's word rule (``ambrosia_services.pipeline.words``:
    runs of ASCII letters, lowered) computed by Spark through ``url``
    (``sc://host:port``)."""
    from ambrosia_services.pipeline.words import LOWER, SEPARATOR, UPPER
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as sf

    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        words = spark.read.text([str(p) for p in paths]).select(
            sf.explode(sf.split(sf.translate("value", UPPER, LOWER), SEPARATOR)).alias("word"))
        rows = words.where("word != ''").groupBy("word").count().collect()
        return Counter({row["word"]: int(row["count"]) for row in rows})
    finally:
        # Stopped explicitly: interpreter exit can hang in SparkSession.__del__.
        spark.stop()
