"""A standalone Spark master and one worker on 127.0.0.1, started with ``spark-class`` (the
pip package has no start-master.sh), for a Connect server started with
``master=cluster.url``: the cluster path of users who outgrow one machine."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ..errors import SparkServerError
from .processes import spark_env, spark_tool, stop_group, wait_for_port

__all__ = ["StandaloneCluster"]


class StandaloneCluster:
    """A standalone master and one worker on 127.0.0.1 (``spark-class``).

    Args:
        master_port: the master's RPC port.
        cores: the worker's cores (set ``spark.cores.max`` on apps that share it).
        memory: the worker's memory, e.g. ``"2g"``.
        log_dir: where ``master.log`` and ``worker.log`` go.
        work_dir: the worker's work directory (default: ``log_dir/work``).
    """

    def __init__(
        self,
        master_port: int,
        *,
        cores: int = 2,
        memory: str = "2g",
        log_dir: str | os.PathLike[str] = ".",
        work_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.master_port = master_port
        self.cores = cores
        self.memory = memory
        self.log_dir = Path(log_dir)
        self.work_dir = Path(work_dir) if work_dir is not None else self.log_dir / "work"
        self.start_timeout = start_timeout
        self._processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, args: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / log_name, "ab")  # noqa: SIM115 (open for the process's life)
        self._logs.append(log)
        process = subprocess.Popen(
            [spark_tool("spark-class"), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=spark_env(),
            start_new_session=True,
        )
        self._processes.append(process)
        return process

    def start(self) -> None:
        """Start the master, wait for its port, start the worker and wait until it has
        registered (the master's log says so).

        Raises:
            SparkServerError: a process exited or did not come up in time.
        """
        try:
            master = self._spawn(
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(self.master_port), "--webui-port", "0"],
                "master.log",
            )
            wait_for_port("127.0.0.1", self.master_port, self.start_timeout, master)
            self.work_dir.mkdir(parents=True, exist_ok=True)
            worker = self._spawn(
                ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                 "--cores", str(self.cores), "--memory", self.memory,
                 "--webui-port", "0", "--work-dir", str(self.work_dir)],
                "worker.log",
            )
            self._wait_registered(worker)
        except BaseException:
            self.stop()
            raise

    def _wait_registered(self, worker: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.start_timeout
        log = self.log_dir / "master.log"
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise SparkServerError(f"the worker exited with {worker.returncode}")
            if b"Registering worker" in log.read_bytes():
                return
            time.sleep(0.2)
        raise SparkServerError(f"no worker registered within {self.start_timeout:.0f} s")

    def stop(self, grace: float = 10.0) -> None:
        for process in reversed(self._processes):
            stop_group(process, grace)
        self._processes.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
