"""The PostgreSQL sink's durable side: rows in a table, committed with real two-phase commit.

A Phase1 the sink votes yes on is one PostgreSQL transaction, prepared and kept:
``BEGIN``; the sink's state row read ``FOR UPDATE``; the range's whole lines inserted as
rows (``COPY``); the state row moved to the range's end (committed offset, the
transaction's id, the piece of a line the range ends in, the row format's context);
``PREPARE TRANSACTION`` with the global id ``ambrosia-pgsink:<sink>:<start>:<end>:<txn>``.
Rows and offset move in that one transaction, so they can never disagree. Phase2 is
``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` of that id.

The state table (``pgschema``) holds one row per sink name. A Phase2 whose prepared
transaction PostgreSQL does not know is decided by that row: a commit is a success when
the row names the transaction as the last committed and stands at its end (only its
answer was lost); an abort is a success unless the row names it (then it was committed,
and the abort is refused). Only the last committed transaction is remembered; the
coordinator never settles an older one.

The prepared transactions of this sink (``pg_prepared_xacts``, this database, the gid
prefix) are read again on every new coordinator connection and every reconnect to the
database; they are what ListUncommitted answers, and the coordinator's deterministic
decision settles them. None is ever settled by guess.

The database may go away at any moment. Waiting for it is a bounded back-off with one
log line per change (lost, unreachable still at the 10th, 100th ... attempt, back); a
request cut off by the loss ends the coordinator's connection (``SinkUnavailableError``)
rather than guess what it left behind. Bytes written but not yet in a Phase1 are kept in
memory only: they are dropped with the connection, as the file sink drops them.

A session-level advisory lock on the sink's name keeps a second ``ambrosia-pgsink`` of
the same name off the database while this one holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ambrosia_core.loops import said_at
from ambrosia_core.retry import Attempts, Retry

from .errors import SinkConfigError, SinkStateError, SinkUnavailableError
from .pgrows import RowFormat
from .pgschema import (
    DEFAULT_STATE_TABLE,
    GID_PREFIX,
    MAX_GID,
    STATE,
    check_name,
    check_server,
    ensure_table,
    gid_of,
    hold_name,
    identifier,
    insert_range,
    load_state,
    one_line,
    parse_gid,
    where,
)
from .sinkport import DATA_STREAM_ID, Prepared, SinkStore, Vote

__all__ = ["DEFAULT_STATE_TABLE", "GID_PREFIX", "PgSinkStore", "RowFormat", "gid_of",
           "parse_gid"]

LOCK_TIMEOUT = "5s"  # a row held by a prepared transaction no one settled: vote no, not hang
# Set on every connection unless the DSN says otherwise: a dead server or network is
# noticed within seconds, not at the kernel's TCP timeout.
_CONNECT_DEFAULTS = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "5",
                     "keepalives_interval": "2", "keepalives_count": "3"}
log = logging.getLogger(__name__)
_T = TypeVar("_T")


class _UnreachableError(Exception):
    """The database cannot be reached or set up now, or another sink of the same name
    holds it (the line says why): tried again, refused at the start."""


class PgSinkStore(SinkStore):
    """A sink's output as rows of ``table`` in the database ``dsn`` names.

    Made with ``await PgSinkStore.open(...)``, which connects, checks the server and the
    tables (creating missing ones) and reads the sink's state.

    Args:
        dsn: a libpq connection string or URL.
        table: the table the rows go to (``TABLE`` or ``SCHEMA.TABLE``; a format with
            more tables adds a suffix to the name).
        name: the sink's name: its rows' ``sink`` column, its state row, its gids.
        row_format: what the lines become (``pgrows``).
        state_table: the table of the sinks' committed offsets.
        max_pending: the most bytes written and not yet in a Phase1.
        backoff_cap: the longest wait between attempts to reach the database.
        on_step: called with the name of each durable step just taken ("rows-inserted",
            "prepared", "committed", "rolled-back"); tests use it to crash between steps.
    """

    def __init__(self, dsn: str, *, table: str, name: str, row_format: RowFormat,
                 state_table: str = DEFAULT_STATE_TABLE, max_pending: int = 256 << 20,
                 backoff_cap: float = 5.0,
                 on_step: Callable[[str], None] | None = None) -> None:
        check_name(name)
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as e:
            raise SinkConfigError(f"bad --dsn: {one_line(e)}") from None
        self._conninfo = make_conninfo(
            dsn, **{k: v for k, v in _CONNECT_DEFAULTS.items() if k not in params})
        self.dsn = dsn
        self.table = table
        self.name = name
        self.format = row_format
        self._tables = {shape.suffix: (identifier(table, shape.suffix), shape)
                        for shape in row_format.tables}
        self._state = identifier(state_table)
        self.max_pending = max_pending
        self._on_step = on_step or (lambda _step: None)
        self.attempts = Attempts(Retry(0.1, backoff_cap, on=(_UnreachableError,)),
                                 delay=self._failed)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._up = True  # the database was reachable at the last attempt
        self.where = ""  # "database D at HOST:PORT", for log lines (never the password)
        self.committed_offset = 0
        self.output_offset = 0
        self.last_txn = ""
        self.prepared: list[Prepared] = []
        self.gap = False
        """A data message skipped ahead of the output offset: the next Phase1 votes no."""
        self._buffer = bytearray()  # written since the last prepared end (or committed)

    # ------------------------------------------------------------ start-up
    @classmethod
    async def open(cls, dsn: str, **kw: Any) -> PgSinkStore:
        """Connect, check the server and the tables, read the state.

        Raises:
            SinkConfigError: a bad DSN, a database that refuses, a server without
                prepared transactions, a table of the wrong shape, or another sink of the
                same name holding the database (one line each).
        """
        store = cls(dsn, **kw)
        try:
            conn = await store._connect()
        except psycopg.Error as e:
            raise SinkConfigError(f"cannot connect to the database: {one_line(e)}") from None
        try:
            await check_server(conn)
            for ident, shape in (*store._tables.values(), (store._state, STATE)):
                await ensure_table(conn, ident, shape)
            await store._setup(conn)
        except _UnreachableError as e:  # another sink of the same name holds it
            await conn.close()
            raise SinkConfigError(str(e)) from None
        except psycopg.Error as e:
            await conn.close()
            raise SinkConfigError(f"the database refused: {one_line(e)}") from None
        except BaseException:
            await conn.close()
            raise
        store._conn = conn
        return store

    async def _setup(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A new connection: hold the sink's name, set the lock timeout, read the state."""
        self.where = where(conn)
        if not await hold_name(conn, self.name):
            raise _UnreachableError(f"another ambrosia-pgsink serves sink {self.name!r} in "
                                    f"the database at {self.where}")
        await conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
        await self._reload(conn)

    async def _reload(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.committed_offset, self.last_txn, self.prepared = await load_state(
            conn, self._state, self.name)

    # ------------------------------------------------------------ the connection
    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        """The live connection, or a new one under the declared retry when it was lost."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._conn = None
        conn = await self.attempts.run(self._connect_and_set_up)
        if not self._up:
            log.info("database at %s reachable again after %d attempt(s) (committed %d, "
                     "%d prepared transaction(s) in doubt)", self.where,
                     self.attempts.failures + 1, self.committed_offset,
                     len(self.prepared))
            self._up = True
        self.attempts.progress()  # a connection set up resets the back-off
        self._conn = conn
        return conn

    async def _connect_and_set_up(self) -> psycopg.AsyncConnection[Any]:
        try:
            conn = await self._connect()
        except psycopg.Error as e:
            raise _UnreachableError(f"the database is unreachable: {one_line(e)}") from None
        try:
            await self._setup(conn)
        except BaseException as e:  # closed whatever happened; a refusal is tried again
            await conn.close()
            raise (_UnreachableError(one_line(e)) if isinstance(e, psycopg.Error) else e) from None
        return conn

    def _failed(self, why: Exception, attempts: Attempts) -> float:
        """Said when the database was up before, then at the 10th, 100th, ... in a row."""
        if self._up:
            log.warning("%s; trying again with back-off", why)
            self._up = False
        elif attempts.failures + 1 >= 10 and said_at(attempts.failures + 1):
            log.warning("%s (%d attempts in a row)", why, attempts.failures + 1)
        return attempts.next_wait()

    async def _op(self, what: str,
                  work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[_T]], *,
                  reads_only: bool = False) -> _T:
        """Run ``work`` on the live connection. A connection lost on the way (or a
        request cancelled mid-way) is dropped. Work that ``reads_only`` is run again on
        the next connection; other work may have left something behind that is now
        unknown, so the coordinator's connection ends too (``SinkUnavailableError``) and
        the next one learns the prepared transactions again.

        Raises:
            SinkUnavailableError: the connection was lost, or the database refused
                ``what`` (the line says why).
        """
        while True:
            conn = await self._connection()
            try:
                return await work(conn)
            except psycopg.Error as e:
                if not (conn.closed or conn.broken):
                    raise SinkUnavailableError(
                        f"the database refused {what}: {one_line(e)}") from None
                await self._drop(conn)
                if self._up:
                    log.warning("lost the database at %s during %s: %s", self.where, what,
                                one_line(e))
                    self._up = False
                if not reads_only:
                    raise SinkUnavailableError(f"lost the database during {what}") from None
            except asyncio.CancelledError:
                await self._drop(conn)
                raise

    async def _drop(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._conn is conn:
            self._conn = None
        with contextlib.suppress(psycopg.Error):  # closing a broken connection
            await conn.close()

    # ------------------------------------------------------------ the session
    async def start_session(self) -> None:
        """A new coordinator connection: the prepared transactions are read again (they
        are what its ListUncommitted gets), written bytes not yet prepared are dropped."""
        await self._op("listing the prepared transactions", self._reload, reads_only=True)
        self._buffer.clear()
        self.gap = False
        self.output_offset = max([p.end for p in self.prepared], default=self.committed_offset)

    def write(self, message_id: int, payload: bytes) -> bool:
        if message_id < self.output_offset:
            raise SinkStateError(
                f"data message id {message_id} is below the output offset "
                f"{self.output_offset} (a duplicate)")
        if message_id > self.output_offset or self.gap:
            self.gap = True
            return False
        if len(self._buffer) + len(payload) > self.max_pending:
            raise SinkStateError(f"more than {self.max_pending} bytes written without a "
                                 "Phase1")
        self._buffer += payload
        self.output_offset += len(payload)
        return True

    async def prepare(self, txn_id: str, ranges: Sequence[tuple[int, int, int]]) -> Vote:
        if len(ranges) > 1 or any(stream != DATA_STREAM_ID for stream, _, _ in ranges):
            return Vote(False, f"Phase1 {txn_id!r} must name one range of stream 1")
        start, end = (ranges[0][1], ranges[0][2]) if ranges else (self.committed_offset,) * 2
        if self.prepared:
            if self.prepared == [Prepared(txn_id, start, end)]:
                return Vote(True)  # the same Phase1 again: the same answer
            return Vote(False, f"transaction {self.prepared[0].txn_id!r} is prepared and not "
                               "yet decided")
        if self.gap:
            return Vote(False, "data was skipped (a message id beyond the output offset)")
        if start != self.committed_offset:
            return Vote(False, f"Phase1 {txn_id!r} starts at {start}, not at the committed "
                               f"offset {self.committed_offset}")
        if not start <= end <= self.output_offset:
            return Vote(False, f"Phase1 {txn_id!r} ends at {end}, outside "
                               f"[{start}, {self.output_offset}]")
        gid = gid_of(self.name, txn_id, start, end)
        if len(gid.encode()) > MAX_GID:
            return Vote(False, f"transaction id {txn_id!r} is too long for a PostgreSQL "
                               f"transaction identifier ({len(gid.encode())} > {MAX_GID} "
                               "bytes with the sink's name)")
        data = bytes(self._buffer[:end - start])

        async def work(conn: psycopg.AsyncConnection[Any]) -> str:
            await conn.execute("BEGIN")
            try:
                why = await insert_range(conn, self._state, self.name, self._tables,
                                         self.format, txn_id, start, end, data)
                if why:
                    await conn.execute("ROLLBACK")
                    return why
                self._on_step("rows-inserted")
                await conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
            except psycopg.Error as e:
                if conn.closed or conn.broken:
                    raise
                await conn.execute("ROLLBACK")
                return f"the database refused it: {one_line(e)}"
            self._on_step("prepared")
            return ""

        why = await self._op(f"Phase1 of {txn_id!r}", work)
        if why:
            return Vote(False, why)
        self.prepared = [Prepared(txn_id, start, end)]
        del self._buffer[:end - start]
        return Vote(True)

    async def commit(self, txn_id: str) -> bool:
        p = next((p for p in self.prepared if p.txn_id == txn_id), None)
        if p is None:
            if txn_id == self.last_txn:
                return False
            raise SinkStateError(f"Phase2 commit of {txn_id!r}, which is not prepared here")
        gid = gid_of(self.name, txn_id, p.start, p.end)

        async def work(conn: psycopg.AsyncConnection[Any]) -> None:
            try:
                await conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
            except psycopg.errors.UndefinedObject:
                committed, last = await self._state_row(conn)
                if (committed, last) != (p.end, txn_id):
                    raise SinkStateError(
                        f"Phase2 commit of {txn_id!r}: its prepared transaction is gone "
                        "and the state row does not name it (rolled back outside this "
                        "sink?)") from None
                log.info("%r was committed already (the state row names it)", txn_id)
            self._on_step("committed")

        await self._op(f"the commit of {txn_id!r}", work)
        self.prepared.remove(p)
        self.committed_offset, self.last_txn = p.end, txn_id
        return True

    async def abort(self, txn_id: str) -> None:
        mine = [p for p in self.prepared if p.txn_id == txn_id]
        if not mine and txn_id == self.last_txn:
            raise SinkStateError(f"Phase2 abort of {txn_id!r}, which is committed")
        for p in mine:
            gid = gid_of(self.name, txn_id, p.start, p.end)

            async def work(conn: psycopg.AsyncConnection[Any], gid: str = gid) -> None:
                try:
                    await conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
                except psycopg.errors.UndefinedObject:
                    committed, last = await self._state_row(conn)
                    if last == txn_id:
                        self.committed_offset, self.last_txn = committed, last
                        raise SinkStateError(f"Phase2 abort of {txn_id!r}, which is "
                                             "committed") from None
                self._on_step("rolled-back")

            await self._op(f"the abort of {txn_id!r}", work)
            self.prepared.remove(p)
        self._buffer.clear()
        self.gap = False
        self.output_offset = max([p.end for p in self.prepared], default=self.committed_offset)

    async def _state_row(self, conn: psycopg.AsyncConnection[Any]) -> tuple[int, str]:
        row = await (await conn.execute(sql.SQL(
            "SELECT committed, last_txn FROM {} WHERE sink = %s").format(self._state),
            (self.name,))).fetchone()
        return (int(row[0]), str(row[1])) if row is not None else (0, "")

    async def uncommitted(self) -> list[str]:
        return [p.txn_id for p in self.prepared]

    async def close(self) -> None:
        if self._conn is not None:
            await self._drop(self._conn)
