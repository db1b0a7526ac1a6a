"""A client of a ØMQ RAFT cluster (``frames`` and ``answers``: the protocol without I/O;
``client``: the asyncio transport over pyzmq), and a local cluster of the real peers for
development and tests (``cluster``). The coordinator's log store on a cluster is
``logstore.raft_store``."""

from __future__ import annotations

from .errors import (
    ConfigUpdateError,
    RaftError,
    RaftProtocolError,
    RaftUnavailableError,
    RequestExpiredError,
    StreamLostError,
)

__all__ = ["ConfigUpdateError", "RaftError", "RaftProtocolError", "RaftUnavailableError",
           "RequestExpiredError",
           "StreamLostError"]
