"""The PostgreSQL sink's names and schema: the global ids of its prepared transactions,
its tables' identifiers and shapes (checked, or created when missing), its state row and
the prepared transactions the database holds for it, and a range's rows. What ``pgstore``
runs its transactions on; no state of its own.

The state table (``ambrosia_sink_state`` unless told otherwise) holds one row per sink
name: ``(sink, committed, last_txn, carry, context)``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from .errors import SinkConfigError
from .pgrows import FORMATS, Column, RowFormat, RowFormatError, TableShape
from .sinkport import Prepared

__all__ = ["DEFAULT_STATE_TABLE", "GID_PREFIX", "MAX_GID", "STATE", "check_name",
           "check_server", "columns", "ensure_table", "gid_of", "hold_name", "identifier",
           "insert_range", "load_state", "one_line", "parse_gid", "row_format", "where"]

GID_PREFIX = "ambrosia-pgsink"
# One table holds every sink's committed offset, a row per sink name, so it needs no name of
# its own (no option): it goes where the connection's search_path puts unqualified names.
DEFAULT_STATE_TABLE = "ambrosia_sink_state"
MAX_GID = 199  # PostgreSQL's transaction identifiers are shorter than 200 bytes
STATE = TableShape("", (Column("sink", "text"), Column("committed", "bigint"),
                        Column("last_txn", "text"), Column("carry", "bytea"),
                        Column("context", "text")), key=("sink",))
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,63}")
log = logging.getLogger("ambrosia_services.connectors.clients.pgstore")


def check_name(name: str) -> None:
    """Refuse a sink name that cannot go in a gid, a lock key and a row.

    Raises:
        SinkConfigError: not 1 to 63 letters, digits, '_', '.' or '-'.
    """
    if not _NAME.fullmatch(name):
        raise SinkConfigError(f"bad sink name {name!r}: 1 to 63 letters, digits, "
                              "'_', '.' or '-'")


async def hold_name(conn: psycopg.AsyncConnection[Any], name: str) -> bool:
    """Take the session-level advisory lock on the sink's name; False when another
    session holds it (another ``ambrosia-pgsink`` of the same name)."""
    row = await (await conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                                    (f"{GID_PREFIX}:{name}",))).fetchone()
    return row is not None and bool(row[0])


def gid_of(sink: str, txn_id: str, start: int, end: int) -> str:
    """The prepared transaction's global id: the sink, the range and the coordinator's
    transaction id (last, as it may hold any character)."""
    return f"{GID_PREFIX}:{sink}:{start}:{end}:{txn_id}"


def parse_gid(sink: str, gid: str) -> Prepared | None:
    """The transaction a gid of ``sink`` names, or None when it is not one of its."""
    parts = gid.split(":", 4)
    if (len(parts) != 5 or parts[0] != GID_PREFIX or parts[1] != sink
            or not parts[2].isdigit() or not parts[3].isdigit()):
        return None
    return Prepared(parts[4], int(parts[2]), int(parts[3]))


def one_line(err: BaseException) -> str:
    """A database error in one line: its first line (libpq adds hints below it)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[0] if lines else type(err).__name__


def identifier(name: str, suffix: str = "") -> sql.Identifier:
    """``name`` (``table`` or ``schema.table``) with ``suffix`` on the table's name."""
    parts = name.split(".")
    if len(parts) > 2 or not all(parts):
        raise SinkConfigError(f"bad table name {name!r}: give TABLE or SCHEMA.TABLE")
    parts[-1] += suffix
    return sql.Identifier(*parts)


async def check_server(conn: psycopg.AsyncConnection[Any]) -> None:
    row = await (await conn.execute("SHOW max_prepared_transactions")).fetchone()
    if row is None or int(row[0]) < 1:
        raise SinkConfigError(
            f"the database at {where(conn)} allows no prepared transactions: set "
            "max_prepared_transactions (e.g. to 10) in its configuration and restart it")

async def ensure_table(conn: psycopg.AsyncConnection[Any], ident: sql.Identifier,
                       shape: TableShape) -> None:
    """Create the table if it is missing; refuse one of another shape: each column of
    the shape with its type, the same primary key, and no other column that a row
    without it would violate."""
    await conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
        ident,
        sql.SQL(", ").join(sql.SQL("{} {} NOT NULL").format(sql.Identifier(c.name),
                                                             sql.SQL(c.type))
                           for c in shape.columns),
        sql.SQL(", ").join(map(sql.Identifier, shape.key))))
    name = ident.as_string(conn)
    cur = await conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
        "a.attnotnull AND NOT a.atthasdef FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
        (name,))
    found = {col: (typ, required) for col, typ, required in await cur.fetchall()}
    for c in shape.columns:
        if c.name not in found:
            raise SinkConfigError(f"table {name} has no column {c.name} ({c.type}); "
                                  f"this sink writes {columns(shape)}")
        if found[c.name][0] != c.type:
            raise SinkConfigError(f"column {c.name} of table {name} is "
                                  f"{found[c.name][0]}, not {c.type}")
    extra = sorted(col for col, (_, required) in found.items()
                   if required and col not in {c.name for c in shape.columns})
    if extra:
        raise SinkConfigError(f"table {name} has required columns this sink does not "
                              f"write: {', '.join(extra)}")
    cur = await conn.execute(
        "SELECT a.attname FROM pg_index i, unnest(i.indkey::int2[]) WITH ORDINALITY "
        "AS k(attnum, n), pg_attribute a WHERE i.indrelid = to_regclass(%s) AND "
        "i.indisprimary AND a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.n",
        (name,))
    key = tuple(r[0] for r in await cur.fetchall())
    if key != shape.key:
        raise SinkConfigError(f"table {name} has primary key ({', '.join(key) or 'none'}), "
                              f"not ({', '.join(shape.key)})")


async def load_state(conn: psycopg.AsyncConnection[Any], state: sql.Identifier,
                     name: str) -> tuple[int, str, list[Prepared]]:
    """The committed offset and last transaction from the sink's state row (made when
    missing), and the prepared transactions of the sink: the in-doubt list."""
    select = sql.SQL("SELECT committed, last_txn FROM {} WHERE sink = %s").format(
        state)
    row = await (await conn.execute(select, (name,))).fetchone()
    if row is None:
        await conn.execute(sql.SQL(
            "INSERT INTO {} (sink, committed, last_txn, carry, context) "
            "VALUES (%s, 0, '', '', '') ON CONFLICT (sink) DO NOTHING").format(state),
            (name,))
        row = await (await conn.execute(select, (name,))).fetchone()
        assert row is not None
    committed, last_txn = int(row[0]), str(row[1])
    cur = await conn.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
        "AND starts_with(gid, %s) ORDER BY prepared", (f"{GID_PREFIX}:{name}:",))
    prepared = []
    for (gid,) in await cur.fetchall():
        p = parse_gid(name, gid)
        if p is None:
            log.warning("prepared transaction %r looks like this sink's but is not "
                        "one of its ids; left alone", gid)
        else:
            prepared.append(p)
    return committed, last_txn, prepared


def where(conn: psycopg.AsyncConnection[Any]) -> str:
    info = conn.info
    host = info.host if info.host.startswith("/") else f"{info.host}:{info.port}"
    return f"{info.dbname} on {host}"


def columns(shape: TableShape) -> str:
    return "(" + ", ".join(f"{c.name} {c.type}" for c in shape.columns) + ")"


def row_format(name: str) -> RowFormat:
    """The row format called ``name``.

    Raises:
        SinkConfigError: no such format.
    """
    try:
        return FORMATS[name]()
    except KeyError:
        raise SinkConfigError(f"no row format {name!r} (there are: "
                              f"{', '.join(sorted(FORMATS))})") from None


async def insert_range(conn: psycopg.AsyncConnection[Any], state: sql.Identifier, name: str,
                       tables: Mapping[str, tuple[sql.Identifier, TableShape]],
                       row_format: RowFormat, txn_id: str, start: int, end: int,
                       data: bytes) -> str:
    """Inside the sink's transaction: the rows of ``[start, end)`` into ``tables`` (by
    suffix) as ``row_format`` makes them, and the state row moved to ``end``. Returns why
    not, or "" when done."""
    row = await (await conn.execute(sql.SQL(
        "SELECT committed, carry, context FROM {} WHERE sink = %s FOR UPDATE").format(
            state), (name,))).fetchone()
    if row is None or row[0] != start:
        return (f"the database's committed offset is {None if row is None else row[0]}, "
                f"not {start}")
    text = bytes(row[1]) + data
    pos = start - len(row[1])
    whole = text.rfind(b"\n") + 1
    lines = []
    for line in text[:whole].split(b"\n")[:-1]:
        lines.append((pos, line))
        pos += len(line) + 1
    try:
        rows, context = row_format.rows(name, txn_id, lines, row[2])
    except RowFormatError as e:
        return str(e)
    for suffix, values in rows.items():
        if not values:
            continue
        ident, shape = tables[suffix]
        async with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
                ident, sql.SQL(", ").join(sql.Identifier(c.name)
                                          for c in shape.columns))) as copy:
            for value in values:
                await copy.write_row(value)
    await conn.execute(sql.SQL(
        "UPDATE {} SET committed = %s, last_txn = %s, carry = %s, context = %s "
        "WHERE sink = %s").format(state),
        (end, txn_id, text[whole:], context, name))
    return ""
