"""Errors of the connector clients: the file feed and the 2PC sinks (files, PostgreSQL).

Protocol errors stay the protocol library's (``ambrosia_services.connectors.errors``); these are
what the clients themselves refuse: a bad address or configuration, a record source that
breaks its promise, a sink directory that cannot be trusted. A bad address is the shared
core's ``AddressError``, named here too.
"""

from __future__ import annotations

from ambrosia_core.errors import AddressError

__all__ = [
    "AddressError",
    "ClientError",
    "FeedSourceError",
    "SinkConfigError",
    "SinkStateError",
    "SinkStorageError",
    "SinkStoreCorruptError",
    "SinkUnavailableError",
    "WorkerSpeaksTlsError",
]


class ClientError(Exception):
    """A connector client cannot go on; the message says why in one line."""


class FeedSourceError(ClientError):
    """A feed's record source broke its promise: ids that do not rise, a point of
    reference it cannot rewind to, a point of reference that is not a line start."""


class WorkerSpeaksTlsError(ClientError):
    """A feed without TLS reached a worker that listens with TLS: it closed the plain
    connection unanswered and answered a TLS hello in TLS. Starting the feed with the
    TLS options is the fix; reconnecting would loop for ever."""


class SinkStoreCorruptError(ClientError):
    """The sink's directory disagrees with its transaction log in a way no crash can
    cause (committed bytes missing or extra, a damaged log record before the last)."""


class SinkStateError(ClientError):
    """A 2PC request the sink's durable state cannot honour (a commit of a transaction
    that is not prepared, an abort of one already committed): the peer's fault."""


class SinkStorageError(ClientError):
    """Writing or syncing the sink's files failed; what reached the disk is unknown, so
    the sink stops and a restart recovers from the txn log."""


class SinkUnavailableError(ClientError):
    """The sink's store lost its database mid-request, so what the request left behind
    is unknown: the link is closed, and the coordinator's next connection learns the
    prepared transactions again (ListUncommitted) once the database is back."""


class SinkConfigError(ClientError):
    """The sink cannot start as configured: a bad DSN, a database that refuses the
    connection or prepared transactions, a table of the wrong shape."""
