"""Connector clients with I/O: a source feed (files or iterators) and a 2PC file sink.

The protocol itself stays in ``services.connectors`` (sans-IO); these modules only move
its bytes over sockets and keep the sink's files. See README.md beside this file.
"""

from .addresses import Address, parse_address
from .errors import (
    AddressError,
    ClientError,
    FeedSourceError,
    SinkStateError,
    SinkStorageError,
    SinkStoreCorruptError,
)
from .feed import Feed
from .filesink import FileSink
from .sinkstore import SinkStore
from .sources import FileSource, IteratorSource, Record, RecordSource, stream_id_of

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
    "parse_address",
    "ClientError",
    "AddressError",
    "FeedSourceError",
    "SinkStateError",
    "SinkStorageError",
    "SinkStoreCorruptError",
]
