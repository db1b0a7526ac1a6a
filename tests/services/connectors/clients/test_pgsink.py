"""The PostgreSQL 2PC sink as a process on 127.0.0.1, against a private PostgreSQL server,
driven by a scripted coordinator: exact rows and votes as the file sink gives them, the
offset moving with the rows, prepared transactions in doubt across a kill -9 of the sink
and settled by the coordinator's decision, a kill -9 of the database server mid-commit,
and start-up refusals in one line."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from ambrosia_services.connectors import ConnectorProtocolError, ErrorFrame

from ambrosia_core.ports import free_ports
from tests.postgres import PostgresServer

from .helpers import ROOT, PgSinkProcess, SinkClient, connect_when_up
from .test_filesink_crashes import Coordinator

_LOST = (OSError, ConnectorProtocolError)


def prepared(pg: PostgresServer, dsn: str) -> list[str]:
    return [gid for (gid,) in pg.query(dsn, "SELECT gid FROM pg_prepared_xacts WHERE "
                                            "database = current_database() ORDER BY gid")]


def rows(pg: PostgresServer, dsn: str, table: str = "out") -> list[tuple[object, ...]]:
    return pg.query(dsn, f'SELECT pos, txn, line FROM "{table}" ORDER BY sink, pos')


@pytest.fixture
def db(postgres: PostgresServer) -> str:
    return postgres.new_database()


def test_commits_rows_exactly_and_votes_as_the_file_sink_does(
        postgres: PostgresServer, db: str, tmp_path: Path) -> None:
    sink = PgSinkProcess(db, tmp_path / "sink.log")
    try:
        c = SinkClient(sink.port)
        c.handshake()
        assert c.list_uncommitted() == ()
        assert c.notify() == 0
        c.data(0, b"ab\n")
        c.data(3, b"cd\n")
        assert c.phase1("t1", 0, 6)
        # Prepared: nothing visible yet, the transaction is PostgreSQL's.
        assert rows(postgres, db) == []
        assert prepared(postgres, db) == ["ambrosia-pgsink:out:0:6:t1"]
        c.phase2("t1", True)
        c.sync()
        assert rows(postgres, db) == [(0, "t1", "ab"), (3, "t1", "cd")]
        assert prepared(postgres, db) == []
        c.data(6, b"ef\n")
        assert not c.phase1("t2", 3, 9)  # start is not the committed offset
        c.phase2("t2", False)
        assert c.reopen() == 6  # the abort dropped "ef\n"
        c.data(6, b"EF\n")
        assert not c.phase1("t3", 6, 10)  # ends beyond the bytes written
        c.phase2("t3", False)
        assert c.reopen() == 6
        # A range may end inside a line: the piece waits in the state row, and the line
        # becomes one row when the next range completes it.
        c.data(6, b"gh\nij")
        assert c.phase1("t4", 6, 11)
        c.phase2("t4", True)
        c.data(11, b"\nkl\n")
        assert c.phase1("t5", 11, 15)
        c.phase2("t5", True)
        c.phase2("t5", True)  # a repeated commit changes nothing
        c.sync()
        assert rows(postgres, db) == [(0, "t1", "ab"), (3, "t1", "cd"), (6, "t4", "gh"),
                                      (9, "t5", "ij"), (12, "t5", "kl")]
        assert postgres.query(db, "SELECT sink, committed, last_txn, carry "
                                  "FROM ambrosia_sink_state") == [("out", 15, "t5", b"")]
        assert c.reopen() == 15
        c.data(12, b"kl\n")  # a duplicate (below the output offset): ERROR and close
        reply = c.recv()
        assert type(reply) is ErrorFrame and "duplicate" in reply.reason
        assert c.sock.recv(1) == b""
        c = SinkClient(sink.port)
        c.handshake()
        c.phase2("t9", True)  # never prepared, not the last committed: refused
        reply = c.recv()
        assert type(reply) is ErrorFrame and "not prepared here" in reply.reason
        assert len(rows(postgres, db)) == 5
    finally:
        sink.kill()


def test_a_prepared_transaction_is_in_doubt_across_kill9_until_the_coordinator_settles_it(
        postgres: PostgresServer, db: str, tmp_path: Path) -> None:
    sink = PgSinkProcess(db, tmp_path / "sink.log")
    c = SinkClient(sink.port)
    c.handshake()
    c.notify()
    c.data(0, b"one\ntwo\n")
    assert c.phase1("t1", 0, 8)
    c.phase2("t1", True)
    c.data(8, b"three\n")
    c.data(14, b"four\n")
    assert c.phase1("t2", 8, 14)
    sink.kill()  # between PREPARE and the decision
    # The database holds t2 prepared, invisible, for whoever settles it.
    assert prepared(postgres, db) == ["ambrosia-pgsink:out:8:14:t2"]
    assert [r[2] for r in rows(postgres, db)] == ["one", "two"]
    sink = PgSinkProcess(db, tmp_path / "sink.log")
    try:
        assert "1 prepared transaction(s) in doubt" in sink.wait_logged("listening on")
        c = SinkClient(sink.port)
        c.handshake()
        assert c.list_uncommitted() == ("t2",)
        assert c.notify() == 14  # committed + prepared; "four\n" was never prepared
        c.phase2("t2", True)
        assert c.list_uncommitted() == ()
        assert [r[2] for r in rows(postgres, db)] == ["one", "two", "three"]
        # The same with an abort: the rows never appear, the offset stays.
        c.data(14, b"five\n")
        assert c.phase1("t3", 14, 19)
        sink.kill()
        sink = PgSinkProcess(db, tmp_path / "sink.log")
        c = SinkClient(sink.port)
        c.handshake()
        assert c.list_uncommitted() == ("t3",)
        c.phase2("t3", False)
        c.phase2("t2", True)  # the last committed: a no-op, even after a restart
        assert c.list_uncommitted() == ()
        assert c.notify() == 14
        assert prepared(postgres, db) == []
        assert [r[2] for r in rows(postgres, db)] == ["one", "two", "three"]
    finally:
        sink.kill()


def test_kill9_of_the_database_or_the_sink_at_each_step_loses_and_duplicates_nothing(
        postgres: PostgresServer, db: str, tmp_path: Path) -> None:
    """The same sink process lives through each kill of the database (it reconnects with
    back-off); the coordinator's session dies with the link and settles what is listed."""
    coord = Coordinator(random.Random(5))
    log = tmp_path / "sink.log"
    for step, after, victim in [
        ("rows-inserted", 2, "database"),  # during the insert: nothing prepared
        ("prepared", 2, "database"),  # between PREPARE and the vote
        ("committed", 2, "database"),  # COMMIT PREPARED done, its answer lost
        ("rows-inserted", 3, "sink"),
        ("prepared", 2, "sink"),
    ]:
        assert postgres.proc is not None
        group = postgres.proc.pid if victim == "database" else 0
        sink = PgSinkProcess(db, log, crash_at=step, crash_after=after, kill_group=group)
        try:
            with pytest.raises(_LOST):
                coord.session(sink.port, sink.committed, 1000)
            if victim == "database":
                postgres.kill9()  # reaps it, so it can start again on its directory
                postgres.start()
                coord.session(sink.port, sink.committed, 5)  # the same sink process
                said = sink.wait_logged("reachable again")
                assert said.count("lost the database at") == 1, said
            else:
                assert sink.proc.wait() == -9
        finally:
            sink.kill()
        assert coord.expected().startswith(sink.committed()), step
    sink = PgSinkProcess(db, log)
    try:
        coord.session(sink.port, sink.committed, 20)
        assert sink.committed() == coord.expected()
        assert prepared(postgres, db) == []
    finally:
        sink.kill()
    assert "Traceback" not in log.read_text()


def test_the_database_down_at_a_new_link_is_waited_for(
        postgres: PostgresServer, db: str, tmp_path: Path) -> None:
    coord = Coordinator(random.Random(6))
    sink = PgSinkProcess(db, tmp_path / "sink.log")
    try:
        coord.session(sink.port, sink.committed, 10)
        postgres.kill9()
        c = connect_when_up(sink.port)
        c.handshake()  # the sink answers HELLO; its listing waits for the database
        c.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            c.list_uncommitted()
        postgres.start()
        c.close()
        coord.session(sink.port, sink.committed, 10)
        assert sink.committed() == coord.expected()
        said = sink.wait_logged("reachable again")
        outages = said.count("the database is unreachable") + said.count("lost the database at")
        assert outages == 1, said  # one line when it went, one when it came back
    finally:
        sink.kill()


def _words(pg: PostgresServer, dsn: str) -> list[tuple[object, ...]]:
    return pg.query(dsn, "SELECT batch, word, count FROM wc ORDER BY pos")


def test_the_word_count_format_stores_batches_and_counts_and_votes_no_on_other_lines(
        postgres: PostgresServer, db: str, tmp_path: Path) -> None:
    sink = PgSinkProcess(db, tmp_path / "sink.log", table="wc",
                         extra=["--format", "wordcount"])
    try:
        c = SinkClient(sink.port)
        c.handshake()
        c.notify()
        out = b"#batch\t1\t2\t3\napple\t2\npear\t1\n#batch\t2\t1\t1\nfig\t1\n#failed\t3\t4\n"
        c.data(0, out[:30])  # ends inside "pear"
        assert c.phase1("t1", 0, 30)
        c.phase2("t1", True)
        c.data(30, out[30:])
        assert c.phase1("t2", 30, len(out))
        c.phase2("t2", True)
        c.data(len(out), b"not a row\n")
        assert not c.phase1("t3", len(out), len(out) + 10)
        c.phase2("t3", False)
        c.sync()
        assert _words(postgres, db) == [(1, "apple", 2), (1, "pear", 1), (2, "fig", 1)]
        assert postgres.query(db, "SELECT batch, lines, words, failed, txn FROM wc_batches "
                                  "ORDER BY pos") == [(1, 2, 3, False, "t1"),
                                                      (2, 1, 1, False, "t2"),
                                                      (3, 4, 0, True, "t2")]
        assert "a bad word count row at output offset" in sink.wait_logged("voting no")
    finally:
        sink.kill()


def _start_fails(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "ambrosia_services.connectors.clients.pgsink",
                          "--listen", "127.0.0.1:0", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ambrosia-pgsink: "), run.stderr
    return lines[0]


def test_bad_configurations_are_refused_in_one_line(
        postgres: PostgresServer, db: str, tmp_path: Path) -> None:
    assert "bad --dsn" in _start_fails("--dsn", "host=x nonsense", "--table", "t")
    (closed,) = free_ports(1)
    assert "cannot connect to the database" in _start_fails(
        "--dsn", f"host=127.0.0.1 port={closed} user=postgres dbname=postgres", "--table", "t")
    assert 'database "nope" does not exist' in _start_fails(
        "--dsn", postgres.dsn("nope"), "--table", "t")
    postgres.query(db, "CREATE TABLE wrong (sink text, pos bigint, line bytea)")
    assert 'table "wrong" has no column txn (text)' in _start_fails(
        "--dsn", db, "--table", "wrong")
    postgres.query(db, "CREATE TABLE typed (sink text, pos integer, txn text, line text)")
    assert 'column pos of table "typed" is integer, not bigint' in _start_fails(
        "--dsn", db, "--table", "typed")
    postgres.query(db, "CREATE TABLE nokey (sink text, pos bigint, txn text, line text)")
    assert "has primary key (none), not (sink, pos)" in _start_fails(
        "--dsn", db, "--table", "nokey")
    assert "bad sink name" in _start_fails("--dsn", db, "--table", "t", "--instance-name", "a:b")
    sink = PgSinkProcess(db, tmp_path / "sink.log")
    try:
        assert "another ambrosia-pgsink serves sink 'out'" in _start_fails(
            "--dsn", db, "--table", "out")
    finally:
        sink.kill()


def test_a_phase2_of_a_gid_the_database_no_longer_has_is_decided_by_the_state_row(
        postgres: PostgresServer, db: str, tmp_path: Path) -> None:
    """An operator settled the prepared transaction by hand: a commit whose effect the
    state row shows is a success; one the state row does not name was rolled back, and
    committing it is refused rather than claimed."""
    sink = PgSinkProcess(db, tmp_path / "sink.log")
    try:
        c = SinkClient(sink.port)
        c.handshake()
        c.notify()
        c.data(0, b"one\n")
        assert c.phase1("t1", 0, 4)
        postgres.query(db, "COMMIT PREPARED 'ambrosia-pgsink:out:0:4:t1'")
        c.phase2("t1", True)
        assert c.list_uncommitted() == ()
        c.data(4, b"two\n")
        assert c.phase1("t2", 4, 8)
        postgres.query(db, "ROLLBACK PREPARED 'ambrosia-pgsink:out:4:8:t2'")
        c.phase2("t2", True)
        reply = c.recv()
        assert type(reply) is ErrorFrame and "its prepared transaction is gone" in reply.reason
        assert [r[2] for r in rows(postgres, db)] == ["one"]
        c = SinkClient(sink.port)
        c.handshake()
        assert c.list_uncommitted() == ()
        assert c.notify() == 4
        # A constraint of the user's refuses a row: rolled back, voted no, nothing stored.
        postgres.query(db, "ALTER TABLE out ADD CONSTRAINT no_x CHECK (line <> 'x')")
        c.data(4, b"x\n")
        assert not c.phase1("t3", 4, 6)
        c.phase2("t3", False)
        assert c.reopen() == 4
        assert "the database refused it" in sink.wait_logged("no_x")
        assert [r[2] for r in rows(postgres, db)] == ["one"]
        assert prepared(postgres, db) == []
    finally:
        sink.kill()


def test_psycopg_loads_only_with_the_postgresql_sink() -> None:
    """psycopg is an extra: the file sink and the package's face must not need it."""
    code = ("import sys, ambrosia_services.connectors.clients as c, "
            "ambrosia_services.connectors.clients.filesink, "
            "ambrosia_services.connectors.clients.pgsink; "
            "assert c.RowFormat and 'psycopg' not in sys.modules; "
            "c.PgSinkStore; assert 'psycopg' in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
