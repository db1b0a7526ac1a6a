"""Settings for every test process and the processes the tests start.

The Spark JVMs the tests start (Connect servers, the demo's, a standalone master, worker
and executor) compile with the JIT's first tier only (``-XX:TieredStopAtLevel=1``): a test
JVM lives for seconds to minutes, too short for the optimizing tier to repay its compiles.
The Spark tests spent 238 s of CPU with the default JIT and 154 s with this, the same
tests passing. They also map the class-data archive that ``make test`` keeps under
``build/spark-cds`` (``tests/jvm_archive.py``), when there is one: a Connect server's start
and first word count took 8.5-9.3 s of CPU with it and 16.0-17.3 s without (three of each,
in turns). ``SPARK_SUBMIT_OPTS`` reaches every JVM ``spark-submit`` starts (a Connect
server), ``SPARK_DAEMON_JAVA_OPTS`` a standalone master and worker; an executor takes
``JVM_OPTIONS`` in ``spark.executor.extraJavaOptions`` (``test_cluster``)."""

from __future__ import annotations

import os

import pytest

from ambrosia_core import ports
from tests.jvm_archive import java_options

JVM_OPTIONS = " ".join(java_options())


def worker_ports(k: int, count: int) -> str:
    """The slice of ports (``AMBROSIA_PORTS``) of worker ``k`` of ``count``."""
    low, high = ports.LOWEST, ports.ephemeral_range()[0]
    size = (high - low) // count
    return f"{low + k * size}-{low + (k + 1) * size}"


def pytest_configure(config: pytest.Config) -> None:
    # Each parallel worker draws ports from a slice of its own (``ambrosia_core.ports``):
    # two workers drawing the same port between choosing and listening made a coordinator
    # fail to start with "Address already in use".
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if worker.startswith("gw") and count > 1 and ports.PORTS_ENV not in os.environ:
        os.environ[ports.PORTS_ENV] = worker_ports(int(worker[2:]), count)
    for name in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        options = os.environ.get(name, "").split()
        added = [o for o in JVM_OPTIONS.split() if o not in options]
        os.environ[name] = " ".join([*options, *added])
