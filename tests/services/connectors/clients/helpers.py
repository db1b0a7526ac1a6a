"""Processes and scripted peers for the connector client tests: a sink process (with an
optional crash hook), and a coordinator-side sink client on a blocking socket."""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ambrosia_services.connectors import (
    SINK_VERSION,
    Ack,
    ConnectionClosed,
    ConnectorConnection,
    EosMessage,
    Event,
    Hello,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Role,
    TwoPCReply,
    Where,
)

from ambrosia_core.ports import free_ports
from ambrosia_core.wire import NEED_DATA

ROOT = Path(__file__).resolve().parents[4]


def free_port() -> int:
    """A free port on 127.0.0.1, below the ephemeral range (see ``ambrosia_core.ports``)."""
    return free_ports(1)[0]


class SinkProcess:
    """``python -m ambrosia_services.connectors.clients.filesink`` (or the crash-hook runner) in
    ``directory``, its log in ``log``; ``port`` once it listens."""

    def __init__(self, directory: Path, log: Path, *, port: int = 0, cookie: str = "",
                 crash_at: str | None = None, crash_after: int = 1,
                 handshake_seconds: float | None = None, extra: Sequence[str] = ()) -> None:
        self.directory, self.log = directory, log
        module = "ambrosia_services.connectors.clients.filesink"
        args = [sys.executable, "-m", module, "--listen", f"127.0.0.1:{port}",
                "--dir", str(directory), "--cookie", cookie, *extra]
        if crash_at is not None:
            args[2] = "tests.services.connectors.clients.crashing_sink"
            args += ["--crash-at", crash_at, "--crash-after", str(crash_after)]
        elif handshake_seconds is not None:  # the sink's constant, set for this process
            args[2:3] = ["tests.services.tuned", module, "ambrosia_services.connectors."
                         f"clients.sinkserver.HANDSHAKE_SECONDS={handshake_seconds}", "--"]
        self.mark = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=out)
        self.port = self._wait_listening()

    def _wait_listening(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[self.mark:].decode(errors="replace")
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise AssertionError(f"the sink exited ({self.proc.returncode}):\n{text}")
            time.sleep(0.02)
        raise AssertionError("the sink did not start listening")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def committed(self) -> bytes:
        return (self.directory / "committed").read_bytes()

    def wait_logged(self, text: str, limit: float = 30.0) -> str:
        """The sink's log (since this process started) once it holds ``text``: the sink
        closes a connection before it logs why, so a test that saw the close waits."""
        deadline = time.monotonic() + limit
        while True:
            logged = self.log.read_bytes()[self.mark:].decode(errors="replace")
            if text in logged:
                return logged
            if time.monotonic() > deadline:
                raise AssertionError(f"the sink never logged {text!r}:\n{logged}")
            time.sleep(0.02)


class PgSinkProcess(SinkProcess):
    """``python -m ambrosia_services.connectors.clients.pgsink`` writing to ``dsn``, or its
    crash-hook runner (``crash_at``: kill -9 of itself, or with ``kill_group`` of that
    process group, the database server, at the ``crash_after``-th time of that step)."""

    def __init__(self, dsn: str, log: Path, *, port: int = 0, table: str = "out",
                 cookie: str = "", crash_at: str | None = None, crash_after: int = 1,
                 kill_group: int = 0, extra: Sequence[str] = ()) -> None:
        self.dsn, self.log, self.table = dsn, log, table
        options = ["--listen", f"127.0.0.1:{port}", "--dsn", dsn, "--table", table,
                   "--cookie", cookie, *extra]
        # A database restarted by a test is found again within 0.3 s (BACKOFF_CAP).
        module = "ambrosia_services.connectors.clients.pgsink"
        args = [sys.executable, "-m", "tests.services.tuned", module,
                f"{module}.BACKOFF_CAP=0.3", "--", *options]
        if crash_at is not None:
            args = [sys.executable, "-m", "tests.services.connectors.clients.crashing_pgsink",
                    "--crash-at", crash_at, "--crash-after", str(crash_after),
                    "--kill-group", str(kill_group), "--", *options]
        self.mark = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=out)
        self.port = self._wait_listening()

    def committed(self) -> bytes:
        return committed_output(self.dsn, self.table)


def committed_output(dsn: str, table: str = "out", sink: str = "") -> bytes:
    """The committed output of a PostgreSQL sink writing ``lines`` rows, as the bytes
    the file sink would hold: each row's line and a newline in output order, then the
    piece of a line the last commit ended in (kept in the state row)."""
    import psycopg

    with psycopg.connect(dsn) as conn:  # one snapshot for the rows and the state row
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        lines = conn.execute(f'SELECT pos, line FROM "{table}" WHERE sink = %s ORDER BY pos',
                             (sink or table,)).fetchall()
        state = conn.execute("SELECT committed, carry FROM ambrosia_sink_state WHERE sink = %s",
                             (sink or table,)).fetchone()
    data = b"".join(line.encode() + b"\n" for _, line in lines)
    data += bytes(state[1]) if state else b""
    assert len(data) == (state[0] if state else 0), "rows and the committed offset disagree"
    offset = 0
    for pos, line in lines:
        assert pos == offset, f"the row at pos {pos} should be at output offset {offset}"
        offset += len(line.encode()) + 1
    return data


class SinkClient:
    """The coordinator's end of a sink link, scripted, on a blocking socket."""

    def __init__(self, port: int, *, cookie: bytes = b"", timeout: float = 10.0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.conn = ConnectorConnection(Role.CONNECTOR, twopc=True, cookie=cookie)
        self.rtag = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, event: Event) -> None:
        self.sock.sendall(self.conn.send(event))

    def recv(self) -> Event:
        while True:
            event = self.conn.next_event()
            if type(event) is ConnectionClosed:
                raise ConnectionResetError("the sink closed the connection")
            if event is not NEED_DATA:
                return event  # type: ignore[return-value]
            self.conn.receive_data(self.sock.recv(1 << 16))

    def handshake(self) -> None:
        self.send(Hello(SINK_VERSION, self.conn.cookie, "coordinator", "c1"))
        ok = self.recv()
        assert type(ok) is Ok and ok.initial_credits == 500, ok

    def list_uncommitted(self) -> tuple[str, ...]:
        self.rtag += 1
        self.send(ListUncommitted(self.rtag))
        reply = self.recv()
        assert type(reply) is ReplyUncommitted and reply.rtag == self.rtag, reply
        return reply.txn_ids

    def notify(self, committed: int = 0) -> int:
        self.send(Notify(1, "out", committed))
        ack = self.recv()
        assert type(ack) is NotifyAck and ack.success and ack.stream_id == 1, ack
        return ack.point_of_reference

    def reopen(self) -> int:
        """EOS then NOTIFY again: after an abort the output resumes below the last id
        sent, and ids only start again at a NOTIFY_ACK. Returns the sink's offset."""
        self.send(EosMessage(1))
        ack = self.recv()
        assert type(ack) is Ack and ack.credits == 1 and ack.acks[0][0] == 1, ack
        offset = self.notify()
        assert ack.acks == ((1, offset),), (ack, offset)
        return offset

    def data(self, offset: int, payload: bytes) -> None:
        self.send(Message(1, offset, payload))

    def phase1(self, txn: str, start: int, end: int) -> bool:
        self.send(Phase1(txn, (Where(1, start, end),)))
        reply = self.recv()
        assert type(reply) is TwoPCReply and reply.txn_id == txn, reply
        return reply.commit

    def phase2(self, txn: str, commit: bool) -> None:
        self.send(Phase2(txn, commit))

    def sync(self) -> None:
        """Wait until the sink has handled everything sent so far (a ListUncommitted
        round trip: the sink answers in order)."""
        self.list_uncommitted()


def connect_when_up(port: int, *, timeout: float = 30.0) -> SinkClient:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return SinkClient(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
