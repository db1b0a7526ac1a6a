"""Spark processes the project starts and supervises: a Connect server, a standalone cluster.

``ConnectServer`` runs the Spark Connect server bundled in the pip package as a child
process (``spark-submit --class ...SparkConnectServer ... spark-internal`` with
``SPARK_NO_DAEMONIZE=1``), waits for its gRPC port, restarts it when it dies under a
declared retry (from 1 s doubling to ``max_backoff``, reset by a restart that serves its
port), and stops it cleanly. Jobs outlive the runners that launched them because they run
here, not in the runners.

The confs it sets, and why (measured with pyspark 4.3.0):

- ``spark.connect.execute.manager.detachedTimeout``: a client killed with ``kill -9`` is
  noticed only after ``senderMaxStreamDuration``; the server then waits this long before
  cancelling its operation. It must exceed the worst failover time, or a runner's crash
  cancels a job a new runner would have committed. Default here: 30 min.
- ``spark.connect.execute.reattachable.senderMaxStreamDuration``: 2 min (the default),
  stated so the sum above is visible.
- ``spark.connect.session.manager.defaultSessionTimeout``: an idle session is closed and
  its id refused for ever; a session per attempt makes that harmless. 60 min.

``StandaloneCluster`` starts a master and one worker with ``spark-class`` on 127.0.0.1
(the pip package has no start-master.sh) for a Connect server started with
``master=cluster.url``: the cluster path of users who outgrow one machine.

Command line: ``python -m ambrosia_services.jobs.spark.server --listen [HOST]:PORT
[--master URL] [--log-dir DIR]``;
without pyspark (the ``spark`` extra: its ``spark-submit`` and jars) it says so in one
line and exits 1. No pyspark import: only processes.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Final

from ambrosia_core.addresses import Address, address_argument
from ambrosia_core.retry import Attempts, Retry

from ..errors import SparkServerError
from .cluster import StandaloneCluster
from .jar import JarBuildError, staged_source_jar
from .processes import (
    StartProgress,
    port_open,
    spark_env,
    spark_tool,
    stop_group,
    wait_for_port,
)

__all__ = [
    "CONNECT_SERVER_CLASS",
    "DEFAULT_CONFS",
    "ConnectServer",
    "StandaloneCluster",
    "StartProgress",
    "StartStoppedError",
    "port_open",
    "spark_env",
    "spark_tool",
    "wait_for_port",
]

CONNECT_SERVER_CLASS: Final = "org.apache.spark.sql.connect.service.SparkConnectServer"

DEFAULT_CONFS: Final[Mapping[str, str]] = {
    "spark.connect.execute.manager.detachedTimeout": "30min",
    "spark.connect.execute.reattachable.senderMaxStreamDuration": "2min",
    "spark.connect.session.manager.defaultSessionTimeout": "60min",
    "spark.ui.enabled": "false",
}



class _ServerDiedError(Exception):
    """The supervised server exited: it is started again after the back-off."""


class ConnectServer:
    """A supervised Spark Connect server on ``host:port`` (127.0.0.1 unless told).

    Args:
        port: the gRPC port.
        host: the address it listens on, and its driver's (``SPARK_LOCAL_IP``): another
            host's runners reach it there. Spark Connect has no authentication here, so
            an address beyond loopback must be on a private network.
        master: ``local[N]`` or a cluster URL such as ``spark://127.0.0.1:7077``.
        log_dir: where ``connect-server.log`` goes (appended across restarts).
        confs: more ``--conf`` settings (over ``DEFAULT_CONFS``).
        start_timeout: seconds to wait for the port after each start.
        max_backoff: the longest wait between restarts (doubling from 1 s).
        jars: jars for ``--jars``; by default the staged-records source (``jar.py``),
            built on first use. When it cannot be built (no JDK) the server starts
            without it, says so in its log, and runners read staged records with Python.
    """

    def __init__(
        self,
        port: int,
        *,
        host: str = "127.0.0.1",
        master: str = "local[2]",
        log_dir: str | os.PathLike[str] = ".",
        confs: Mapping[str, str] | None = None,
        start_timeout: float = 120.0,
        max_backoff: float = 30.0,
        jars: Sequence[str | os.PathLike[str]] | None = None,
    ) -> None:
        self.port = port
        self.jars: list[str] | None = None if jars is None else [str(j) for j in jars]
        self.host = host
        self.master = master
        self.log_path = Path(log_dir) / "connect-server.log"
        self.confs = {**DEFAULT_CONFS, **(confs or {})}
        self.start_timeout = start_timeout
        self.max_backoff = max_backoff
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._lock = threading.Lock()
        # Its lives: the first start()'s, then each restart's (``_life``).
        self.attempts = Attempts(
            Retry(floor=1.0, cap=max_backoff, on=(SparkServerError, _ServerDiedError)),
            delay=self._restart_said)

    @property
    def url(self) -> str:
        return f"sc://{Address(self.host, self.port)}"

    @property
    def pid(self) -> int | None:
        process = self._process
        return None if process is None else process.pid

    def command(self) -> list[str]:
        conf_args = [a for k, v in self.confs.items() for a in ("--conf", f"{k}={v}")]
        return [
            spark_tool("spark-submit"),
            "--class", CONNECT_SERVER_CLASS,
            "--master", self.master,
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", f"spark.connect.grpc.binding.address={self.host}",
            *(("--jars", ",".join(self.jars)) if self.jars else ()),
            *conf_args,
            "spark-internal",
        ]

    def _launch(self, stop: threading.Event | None = None) -> subprocess.Popen[bytes]:
        if stop is not None and stop.is_set():
            raise StartStoppedError
        if port_open(self.host, self.port):
            raise SparkServerError(f"port {self.port} is already in use on {self.host}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 (open for the server's life)
        process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=spark_env({"SPARK_LOCAL_IP": self.host}),
            start_new_session=True,  # its own group: stop() takes the JVM's children too
        )
        shown = StartProgress(self.log_path.with_name("connect-server.startup"))
        started = time.monotonic()

        def tick(elapsed: float) -> None:
            # Polled, never raised from a signal handler: one raised while Popen waited
            # for the exec left the JVM running with no one to stop it.
            if stop is not None and stop.is_set():
                raise StartStoppedError
            shown.tick(elapsed)

        try:
            wait_for_port(self.host, self.port, self.start_timeout, process, tick)
        except BaseException:  # not up, or a stop asked meanwhile: the JVM goes too
            shown.done(None)
            stop_group(process, 5)
            raise
        shown.done(time.monotonic() - started)
        return process

    def start(self, stop: threading.Event | None = None) -> None:
        """Start the server, wait for its port, and supervise it from a thread. A ``stop``
        set meanwhile ends the wait and takes the JVM down (within a tenth of a second).

        Raises:
            SparkServerError: it did not open its port (see the log).
            StartStoppedError: ``stop`` was set before the port opened.
        """
        if self.jars is None:
            self.jars = self._default_jars()
        with self._lock:
            self._process = self._launch(stop)
        self._supervisor = threading.Thread(
            target=self._supervise, name=f"connect-server-{self.port}", daemon=True
        )
        self._supervisor.start()

    def _default_jars(self) -> list[str]:
        try:
            return [str(staged_source_jar())]
        except JarBuildError as err:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as out:
                out.write(f"[supervisor] without the staged-records source ({err}): runners "
                          "read staged records with Python workers\n".encode())
            print(f"warning: {err}: staged records will be read with Python workers "
                  "(slower)", file=sys.stderr)
            return []

    def _supervise(self) -> None:
        self.attempts.run_blocking(self._life, self._stopping)

    def _life(self) -> None:
        """One life of the server: started again (all but the first, which ``start``
        began), then waited for; its end raises ``_ServerDiedError`` (returns: stopped)."""
        if self.attempts.started > 1:
            with self._lock:
                if self._stopping.is_set():
                    return
                self._process = self._launch()
            self.restarts += 1
            self.attempts.progress()  # it serves its port again
        process = self._process
        assert process is not None
        process.wait()
        if not self._stopping.is_set():
            raise _ServerDiedError(f"the Connect server exited ({process.returncode})")

    def _restart_said(self, error: Exception, attempts: Attempts) -> float:
        """A failed restart is said at the first of a streak, then the 10th, 100th, ..."""
        if (isinstance(error, SparkServerError) and self._log is not None
                and attempts.worth_saying):
            self._log.write(f"\n[supervisor] restart failed ({attempts.failures} in a row): "
                            f"{error}\n".encode())
            self._log.flush()
        return attempts.next_wait()

    def wait_restarted(self, previous_pid: int, timeout: float) -> None:
        """Wait until a process other than ``previous_pid`` serves the port (for tests and
        for callers that killed it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.pid
            if pid is not None and pid != previous_pid and port_open(self.host, self.port):
                return
            time.sleep(0.2)
        raise SparkServerError(f"the Connect server was not restarted within {timeout:.0f} s")

    def stop(self, grace: float = 15.0) -> None:
        """Stop supervising and stop the server (SIGTERM, then SIGKILL)."""
        self._stopping.set()
        with self._lock:
            if self._process is not None:
                stop_group(self._process, grace)
        if self._supervisor is not None:
            self._supervisor.join(grace)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ConnectServer:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()



def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ambrosia_services.jobs.spark.server",
        description="Run and supervise a Spark Connect server until stopped.",
    )
    parser.add_argument("--listen", required=True, metavar="[HOST]:PORT",
                        type=address_argument(default_host="127.0.0.1"),
                        help="where the gRPC server listens (:PORT for 127.0.0.1), which "
                             "runners on other hosts connect to; Spark Connect has "
                             "no authentication here: keep it on a private network")
    parser.add_argument("--master", default="local[2]", help="local[N] or spark://host:port")
    parser.add_argument("--log-dir", default=".",
                        help="directory for connect-server.log (default: the current one)")
    # --set, as `ambrosia run` sets a configuration key (spark-submit's spelling is --conf).
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        dest="sets", help="a Spark configuration key for the server, as "
                                          "spark-submit's --conf (repeatable)")
    args = parser.parse_args(argv)
    if not _pyspark_installed():
        print("error: the Spark Connect server needs pyspark, part of Spark's client (its "
              "spark-submit and jars): pip install 'ambrosia-py[spark]'", file=sys.stderr)
        return 1
    confs = {}
    for item in args.sets:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r} is not KEY=VALUE")
        confs[key] = value
    host, port = args.listen.host, args.listen.port
    server = ConnectServer(port, host=host, master=args.master, log_dir=args.log_dir,
                           confs=confs)
    if not _loopback(host):
        print(f"warning: Spark Connect at {args.listen} accepts anyone who can "
              "reach it (no authentication): keep it on a private network", file=sys.stderr)
    stop = threading.Event()

    stopped_by: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        # While the server starts (15-20 s of JVM), the start sees the stop at its next
        # look and takes its JVM down with it; afterwards it ends the main thread's wait.
        if not stop.is_set():
            stopped_by.append(signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        server.start(stop)
    except SparkServerError as err:
        print(f"error: {err} (log: {server.log_path})", file=sys.stderr)
        return 1
    except StartStoppedError:
        server.stop()
        print(f"stopped ({stopped_by[0]}) before the server was ready", file=sys.stderr)
        return 0
    print(f"Spark Connect server at {server.url} (log: {server.log_path})", flush=True)
    stop.wait()
    server.stop()
    return 0


def _pyspark_installed() -> bool:
    """Whether pyspark can be imported, found without importing it."""
    try:
        return importlib.util.find_spec("pyspark") is not None
    except (ImportError, ValueError):  # ValueError: None in sys.modules (import blocked)
        return False


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False  # unknown here: the server's own start says what is wrong with it


class StartStoppedError(Exception):
    """A stop was asked while the server was starting."""


if __name__ == "__main__":
    sys.exit(main())
