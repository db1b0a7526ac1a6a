"""The PostgreSQL 2PC sink command: a ``SinkServer`` over a ``PgSinkStore``.

To the coordinator it is the file sink (the same protocol half, ``sinkserver``); its
output becomes rows of a table, each Phase1 a prepared PostgreSQL transaction, each
Phase2 ``COMMIT PREPARED`` or ``ROLLBACK PREPARED`` (see ``pgstore``).

    ambrosia-pgsink --listen 127.0.0.1:7201 --dsn 'host=... dbname=...' --table out

(or ``python -m ambrosia_services.connectors.clients.pgsink``)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable

from .errors import ClientError
from .sinkcommand import add_server_options, serve
from .sinkserver import SinkStore

__all__ = ["BACKOFF_CAP", "MAX_PENDING_BYTES", "build_parser", "main", "run"]

# What the sink writes to its open transaction before the next Phase1 is bounded, so that a
# coordinator that never votes cannot fill the database's disk; 256 MiB is about 250 of
# the pipeline's 1 MiB staged batches, far past what one commit interval carries.
MAX_PENDING_BYTES = 256 << 20
# A lost database is tried again with back-off up to this many seconds: a restarted
# PostgreSQL is found within 5 s of accepting connections, and a dead one is asked at most
# once every 2.5 to 5 s.
BACKOFF_CAP = 5.0


async def run(args: argparse.Namespace, on_step: Callable[[str], None] | None = None) -> None:
    """Serve as ``args`` (from ``build_parser``) say until stopped; ``on_step`` is the
    store's hook (see ``PgSinkStore``)."""
    from .pgschema import row_format
    from .pgstore import PgSinkStore

    async def open_store() -> PgSinkStore:  # may create its tables: after every check
        return await PgSinkStore.open(
            args.dsn, table=args.table, name=args.instance_name or args.table.rpartition(".")[2],
            row_format=row_format(args.format),
            max_pending=MAX_PENDING_BYTES, backoff_cap=BACKOFF_CAP,
            on_step=on_step)

    def describe(store: SinkStore) -> str:
        assert isinstance(store, PgSinkStore)
        return (f"database {store.where}, table {args.table} ({args.format}), sink "
                f"{store.name}, committed {store.committed_offset} bytes, "
                f"{len(store.prepared)} prepared transaction(s) in doubt")

    await serve(open_store, args, describe)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ambrosia-pgsink",
        description="A 2PC sink for the Wallaroo connector protocol that commits its "
                    "output to PostgreSQL with PREPARE TRANSACTION / COMMIT PREPARED.")
    add_server_options(p, 7201)
    p.add_argument("--dsn", required=True,
                   help="the database: a libpq connection string ('host=H port=P "
                        "dbname=D user=U') or URL ('postgresql://U@H:P/D'); the server "
                        "needs max_prepared_transactions above 0")
    p.add_argument("--table", required=True, metavar="[SCHEMA.]TABLE",
                   help="the table the output rows go to (created if missing)")
    p.add_argument("--format", default="lines", choices=["lines", "wordcount"],
                   help="what a line becomes: 'lines' (default: a row per line, as text) "
                        "or 'wordcount' (the word count pipeline's batches and counts)")
    p.add_argument("--instance-name", default="",
                   help="the sink's name, in its rows, its state row (in the table "
                        "ambrosia_sink_state) and its prepared transactions' ids "
                        "(default: the table's name)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ambrosia-pgsink: %(message)s")
    try:
        asyncio.run(run(args))
    except ModuleNotFoundError as e:
        if e.name != "psycopg":
            raise
        print("ambrosia-pgsink: needs psycopg: pip install 'ambrosia-py[postgres]'",
              file=sys.stderr)
        return 1
    except (ClientError, OSError) as e:
        print(f"ambrosia-pgsink: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
