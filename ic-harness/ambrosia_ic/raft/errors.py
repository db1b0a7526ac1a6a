"""The errors of the ØMQ RAFT client: each says in one line whose fault it was."""

from __future__ import annotations

from ambrosia_core.errors import CoordinatorError, RemoteProtocolError

__all__ = ["ConfigUpdateError", "RaftError", "RaftProtocolError", "RaftUnavailableError",
           "RequestExpiredError",
           "StreamLostError"]


class RaftError(CoordinatorError):
    """The cluster did not do what was asked."""


class RaftProtocolError(RaftError, RemoteProtocolError):
    """A peer sent frames that do not follow the ØMQ RAFT protocol."""


class RaftUnavailableError(RaftError):
    """No leader answered within the time allowed (the cluster is down or partitioned)."""


class StreamLostError(RaftUnavailableError):
    """The peer streaming entries stopped answering or lost its leadership; reading
    again from the last entry received goes on where it stopped."""


class RequestExpiredError(RaftError):
    """The cluster refused an update because its request id is older than the cluster's
    request id time to live: it was not applied, and never will be."""


class ConfigUpdateError(RaftError):
    """The cluster refused a configuration change (bad argument, or still busy)."""
