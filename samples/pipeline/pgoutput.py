"""The committed output when the demo writes to PostgreSQL (``run_pipeline.py --postgres
DSN``): ``ambrosia-pgsink --format wordcount`` keeps each batch header as a row of
``<table>_batches`` and each word count as a row of ``<table>``, both keyed by the sink's
name and the line's output offset (``pos``). Read back in ``pos`` order they are the bytes
the file sink would hold, so the same strict check (``output.parse_output``) reads them.
psycopg (the ``postgres`` extra) is loaded only when a database is read.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["TABLE", "PgOutputTail", "committed_bytes", "sink_name"]

TABLE = "wordcount"


def sink_name(run_name: str) -> str:
    """A sink name for one run (its rows, its state row): the run directory's name, in
    the characters a sink name may hold, so that runs sharing a database stay apart."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", run_name)[-63:] or "wordcount"


def _connect(dsn: str) -> Any:
    import psycopg

    conn = psycopg.connect(dsn, connect_timeout=5)
    # One snapshot for both tables: a commit between two reads would split a batch.
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    return conn


def committed_bytes(dsn: str, sink: str, table: str = TABLE) -> bytes:
    """The committed output of ``sink``, rebuilt line by line from its rows."""
    from psycopg import sql

    with _connect(dsn) as conn:
        headers = conn.execute(sql.SQL(
            "SELECT pos, batch, lines, words, failed FROM {} WHERE sink = %s").format(
                sql.Identifier(table + "_batches")), (sink,)).fetchall()
        words = conn.execute(sql.SQL(
            "SELECT pos, word, count FROM {} WHERE sink = %s").format(sql.Identifier(table)),
            (sink,)).fetchall()
    lines = [(pos, f"#failed\t{k}\t{n}\n" if failed else f"#batch\t{k}\t{n}\t{w}\n")
             for pos, k, n, w, failed in headers]
    lines += [(pos, f"{word}\t{count}\n") for pos, word, count in words]
    return "".join(text for _, text in sorted(lines)).encode()


class PgOutputTail:
    """``output.OutputTail`` for the tables: the batch headers committed since the last
    ``poll`` (a database that does not answer now is asked again next time)."""

    def __init__(self, dsn: str, sink: str, table: str = TABLE) -> None:
        from psycopg import sql

        self.dsn, self.sink = dsn, sink
        self._query = sql.SQL(
            "SELECT pos, batch, lines, words FROM {} WHERE sink = %s AND pos > %s "
            "AND NOT failed ORDER BY pos").format(sql.Identifier(table + "_batches"))
        self._pos = -1
        self.headers: list[tuple[int, int, int]] = []  # (batch, lines, words)

    def poll(self) -> list[tuple[int, int, int]]:
        import psycopg

        try:
            with _connect(self.dsn) as conn:
                rows = conn.execute(self._query, (self.sink, self._pos)).fetchall()
        except psycopg.Error:
            return []
        if rows:
            self._pos = rows[-1][0]
        new = [(k, lines, words) for _, k, lines, words in rows]
        self.headers += new
        return new

    @property
    def lines(self) -> int:
        return sum(h[1] for h in self.headers)
