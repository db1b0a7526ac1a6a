"""Server processes for the alternatives benchmark (run as a script, one mode per process).

    python alt_servers.py tcp            raw TCP counter server on 127.0.0.1
    python alt_servers.py grpc           gRPC unary-call counter server on 127.0.0.1
    python alt_servers.py dbos DIR N W   the whole DBOS workload, in process, state under DIR

The two servers print ``PORT <n>`` once listening and serve until their standard input is
closed.  The DBOS mode prints one JSON line, the checked :class:`alt_workload.RunResult`.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from alt_workload import MESSAGE_SIZE, DedupCounter, run_workload

GRPC_SERVICE = "ambrosia_bench.Counter"
GRPC_ADD = f"/{GRPC_SERVICE}/Add"


def _announce(port: int) -> None:
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()


def _wait_for_stdin_eof() -> None:
    sys.stdin.buffer.read()


# ---------------------------------------------------------------------------------- raw TCP


def _recv_exactly(conn: socket.socket, size: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < size:
        chunk = conn.recv(size - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _serve_tcp_connection(conn: socket.socket, counter: DedupCounter) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            request = _recv_exactly(conn, MESSAGE_SIZE)
            if request is None:
                return
            conn.sendall(counter.handle(request))


def serve_tcp() -> None:
    counter = DedupCounter()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def accept_loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(
                target=_serve_tcp_connection, args=(conn, counter), daemon=True
            ).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    _announce(listener.getsockname()[1])
    _wait_for_stdin_eof()
    listener.close()


# ------------------------------------------------------------------------------------- gRPC


def serve_grpc() -> None:
    # No protoc step: a generic handler with raw-bytes (identity) serializers.
    import grpc

    counter = DedupCounter()

    def add(request: bytes, context: Any) -> bytes:
        return counter.handle(request)

    handler = grpc.method_handlers_generic_handler(
        GRPC_SERVICE, {"Add": grpc.unary_unary_rpc_method_handler(add)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    _announce(port)
    _wait_for_stdin_eof()
    server.stop(grace=None)


# ------------------------------------------------------------------------------------- DBOS


def run_dbos(state_dir: str, requests: int, warmup: int) -> dict[str, Any]:
    """The DBOS contender: one durable workflow per request, the request id as workflow id.

    The workflow runs one DBOS datasource transaction that updates the counter row; DBOS
    records the transaction's output in the same SQLite transaction, and the workflow's
    outcome in its system database, so a retried workflow id returns the recorded reply
    without touching the counter.  Both databases are SQLite files under ``state_dir`` (the
    system database is DBOS's default SQLite, just placed in a temporary directory).
    """
    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID, SQLAlchemyDatasource

    base = Path(state_dir)
    DBOS(
        config={
            "name": "ambrosia-bench-counter",
            "system_database_url": f"sqlite:///{base / 'dbos_system.sqlite'}",
            "log_level": "WARNING",
        }
    )
    ds = SQLAlchemyDatasource.create(f"sqlite:///{base / 'counter.sqlite'}")
    with ds.engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE IF NOT EXISTS counter "
                "(id INTEGER PRIMARY KEY, count INTEGER NOT NULL, total INTEGER NOT NULL)"
            )
        )
        conn.execute(sa.text("INSERT OR IGNORE INTO counter VALUES (1, 0, 0)"))

    @ds.transaction()
    def add_to_counter(amount: int) -> list[int]:
        row = (
            ds.sql_session()
            .execute(
                sa.text(
                    "UPDATE counter SET count = count + 1, total = total + :amount "
                    "WHERE id = 1 RETURNING count, total"
                ),
                {"amount": amount},
            )
            .one()
        )
        return [row[0], row[1]]

    @DBOS.workflow()
    def add_request(amount: int) -> list[int]:
        return add_to_counter(amount)

    DBOS.launch()

    def call(request_id: int, amount: int) -> tuple[int, int]:
        with SetWorkflowID(f"add-{request_id}"):
            count, total = add_request(amount)
        return count, total

    def read_state() -> tuple[int, int]:
        with ds.engine.connect() as conn:
            count, total = conn.execute(
                sa.text("SELECT count, total FROM counter WHERE id = 1")
            ).one()
        return count, total

    try:
        result = run_workload("dbos", call, read_state, requests, warmup)
    finally:
        DBOS.destroy(destroy_registry=True)
    return result.to_json()


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else ""
    if mode == "tcp":
        serve_tcp()
    elif mode == "grpc":
        serve_grpc()
    elif mode == "dbos":
        state_dir, requests, warmup = argv[1], int(argv[2]), int(argv[3])
        sys.stdout.write(json.dumps(run_dbos(state_dir, requests, warmup)) + "\n")
    else:
        sys.stderr.write(__doc__ or "")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
