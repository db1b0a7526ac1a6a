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
    SinkStoreCorruptError,
)
from .filesink import FileSink
from .sinkstore import SinkStore

__all__ = [
    "Address",
    "parse_address",
    "FileSink",
    "SinkStore",
    "ClientError",
    "AddressError",
    "FeedSourceError",
    "SinkStateError",
    "SinkStoreCorruptError",
]
