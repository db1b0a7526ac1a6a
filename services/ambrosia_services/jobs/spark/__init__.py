"""The Spark side of the job protocol: job functions, a supervised Spark Connect server,
a standalone cluster, and running one job attempt (``execute``).

Importing this package imports no pyspark: the modules that do (``execute`` and
``_connect_internals``) are imported by job runners only, so a coordinator can use
``spark_job`` names and ``ConnectServer`` without loading Spark's client.
"""

from typing import TYPE_CHECKING, Any

from .registry import JobDefinition, JobRegistry, definition_of, spark_job

if TYPE_CHECKING:
    from .server import ConnectServer, StandaloneCluster

__all__ = [
    "ConnectServer",
    "JobDefinition",
    "JobRegistry",
    "StandaloneCluster",
    "definition_of",
    "spark_job",
]


def __getattr__(name: str) -> Any:
    # The server's classes load on first use: ``python -m ambrosia_services.jobs.spark.server``
    # then runs a module the package has not imported already (runpy warned about it).
    if name in ("ConnectServer", "StandaloneCluster"):
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
