"""Settings for every test process and the processes the tests start.

The Spark JVMs the tests start (Connect servers, the demo's, a standalone master and
worker) compile with the JIT's first tier only (``-XX:TieredStopAtLevel=1``): a test JVM
lives for seconds to minutes, too short for the optimizing tier to repay its compiles.
The Spark tests spent 238 s of CPU with the default JIT and 154 s with this, the same
tests passing. ``SPARK_SUBMIT_OPTS`` reaches every JVM ``spark-submit`` starts (a Connect
server), ``SPARK_DAEMON_JAVA_OPTS`` a standalone master and worker; an executor takes
``JIT_FIRST_TIER`` in ``spark.executor.extraJavaOptions`` (``test_cluster``)."""

from __future__ import annotations

import os

import pytest

JIT_FIRST_TIER = "-XX:TieredStopAtLevel=1"


def pytest_configure(config: pytest.Config) -> None:
    for name in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        options = os.environ.get(name, "").split()
        if JIT_FIRST_TIER not in options:
            os.environ[name] = " ".join([*options, JIT_FIRST_TIER])
