"""A private PostgreSQL server for the tests of the PostgreSQL sink: Debian's binaries,
``initdb`` in a temporary directory, ``postgres`` on a free port of 127.0.0.1 with its
unix socket in that directory, killable with kill -9 and restartable on the same
directory and port. The ``postgres`` fixture (one server per test session and worker)
hands each test its own database.

initdb refuses to run as root, and tests run as root here and on CI: then the server
runs as Debian's ``postgres`` user, which owns the directory. It runs with
``fsync=off``: a kill -9 of the server loses nothing the kernel holds (only a machine
crash would), and the tests kill processes, not machines.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ambrosia_core.ports import free_ports

__all__ = ["PostgresServer", "postgres"]


def _bin_dir() -> Path:
    """Where initdb and postgres are: on PATH, else Debian's newest
    ``/usr/lib/postgresql/<version>/bin``."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    if not versions:
        raise RuntimeError("no PostgreSQL server binaries (initdb) found: `make install` "
                           "installs Debian's postgresql")
    return versions[-1].parent


class PostgresServer:
    """One server in ``base`` (``base/data`` its cluster, ``base`` its socket directory)
    listening on 127.0.0.1:``port``."""

    def __init__(self, base: Path, port: int) -> None:
        self.base, self.port = base, port
        self.data = base / "data"
        self.log = base / "server.log"
        self.bin = _bin_dir()
        self.user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._databases = itertools.count(1)

    def _as_server(self) -> dict[str, Any]:
        """Popen arguments that run a child as the server's user."""
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def init(self) -> None:
        self.base.mkdir(mode=0o700, exist_ok=True)
        if self.user is not None:
            os.chown(self.base, self.user.pw_uid, self.user.pw_gid)
        done = subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                               "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                              capture_output=True, text=True, cwd=self.base,
                              **self._as_server())
        if done.returncode:
            raise RuntimeError(f"initdb failed:\n{done.stdout}{done.stderr}")

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it takes connections."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-k", str(self.base), "-c", "listen_addresses=127.0.0.1",
                 "-c", "max_prepared_transactions=20", "-c", "max_connections=60",
                 "-c", "fsync=off", "-c", "full_page_writes=off"],
                stdout=out, stderr=out, cwd=self.base, start_new_session=True,
                **self._as_server())
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL did not start:\n{self.log_tail()}") from None
                time.sleep(0.05)

    def kill9(self) -> None:
        """kill -9 of the whole server (the postmaster and every backend at once), then
        wait until none of its processes runs, so it can start again on its directory."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        deadline = time.monotonic() + 20
        while _group_alive(self.proc.pid):
            if time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL's processes outlived kill -9")
            time.sleep(0.02)
        self.proc = None

    def stop(self) -> None:
        """A fast shutdown (SIGINT), kill -9 if it takes too long."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(20)
        self.kill9()

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def new_database(self) -> str:
        """A new, empty database; its DSN."""
        name = f"test_{os.getpid()}_{next(self._databases)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def query(self, dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        """The rows of one statement, in its own connection (nothing held open)."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies do not count: they hold no
    shared memory, and no one here may reap a dead postmaster's orphans)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    base = Path(tempfile.mkdtemp(prefix="ambrosia-pg-"))  # owned by the server's user
    server = PostgresServer(base, free_ports(1)[0])
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
