"""The Spark side of the job protocol: job functions, a supervised Spark Connect server,
a standalone cluster, and running one job attempt (``execute``).

Importing this package imports no pyspark: the modules that do (``execute`` and
``_connect_internals``) are imported by job runners only, so a coordinator can use
``spark_job`` names and ``ConnectServer`` without loading Spark's client.
"""

from .registry import JobDefinition, JobRegistry, definition_of, spark_job
from .server import ConnectServer, StandaloneCluster

__all__ = [
    "ConnectServer",
    "JobDefinition",
    "JobRegistry",
    "StandaloneCluster",
    "definition_of",
    "spark_job",
]
