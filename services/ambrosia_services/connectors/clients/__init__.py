"""Connector clients with I/O: a source feed (files or iterators) and a 2PC file sink.

The protocol itself stays in ``ambrosia_services.connectors`` (sans-IO); these modules only move
its bytes over sockets and keep the sink's files. See README.md beside this file.
"""

from typing import TYPE_CHECKING, Any

from ambrosia_core.addresses import Address

from .errors import (
    AddressError,
    ClientError,
    FeedSourceError,
    SinkStateError,
    SinkStorageError,
    SinkStoreCorruptError,
)
from .sinkstore import SinkStore
from .sources import FileSource, IteratorSource, Record, RecordSource, stream_id_of

if TYPE_CHECKING:
    from .feed import Feed
    from .filesink import FileSink

# ``feed`` and ``filesink`` are also run as ``python -m``: imported here eagerly, runpy would
# find them already in sys.modules and warn, so they load on first use instead.
_LAZY = {"Feed": "feed", "FileSink": "filesink"}


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
    "Record",
    "RecordSource",
    "stream_id_of",
    # the 2PC file sink
    "FileSink",
    "SinkStore",
    # shared
    "Address",
    "ClientError",
    "AddressError",
    "FeedSourceError",
    "SinkStateError",
    "SinkStorageError",
    "SinkStoreCorruptError",
]
