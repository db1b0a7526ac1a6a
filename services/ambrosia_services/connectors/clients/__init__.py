"""Connector clients with I/O: a source feed (files or iterators) and 2PC sinks, one
writing files and one writing PostgreSQL.

The protocol itself stays in ``ambrosia_services.connectors`` (sans-IO); these modules only move
its bytes over sockets and keep the sinks' durable state. See README.md beside this file.
"""

from typing import TYPE_CHECKING, Any

from ambrosia_core.addresses import Address

from .errors import (
    AddressError,
    ClientError,
    FeedSourceError,
    SinkConfigError,
    SinkStateError,
    SinkStorageError,
    SinkStoreCorruptError,
    SinkUnavailableError,
    WorkerSpeaksTlsError,
)
from .sinkserver import Prepared, SinkServer, SinkStore, Vote
from .sinkstore import FileSinkStore
from .sources import FeedRecord, FileSource, IteratorSource, RecordSource, stream_id_of

if TYPE_CHECKING:
    from .feed import Feed
    from .filesink import FileSink
    from .pgrows import RowFormat
    from .pgstore import PgSinkStore

# ``feed``, ``filesink`` and ``pgsink`` are also run as ``python -m``: imported here eagerly,
# runpy would find them already in sys.modules and warn, so they load on first use
# instead; ``pgstore`` needs psycopg (the ``postgres`` extra), loaded only when used.
_LAZY = {"Feed": "feed", "FileSink": "filesink", "PgSinkStore": "pgstore",
         "RowFormat": "pgrows"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    # the source feed
    "Feed",
    "FileSource",
    "IteratorSource",
    "FeedRecord",
    "RecordSource",
    "stream_id_of",
    # the 2PC sinks: the protocol half, the store interface, files, PostgreSQL
    "SinkServer",
    "SinkStore",
    "Prepared",
    "Vote",
    "FileSink",
    "FileSinkStore",
    "PgSinkStore",
    "RowFormat",
    # shared
    "Address",
    "ClientError",
    "AddressError",
    "FeedSourceError",
    "SinkConfigError",
    "SinkStateError",
    "SinkStorageError",
    "SinkStoreCorruptError",
    "SinkUnavailableError",
    "WorkerSpeaksTlsError",
]
