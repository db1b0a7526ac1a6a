"""Registrations in the cluster: an instance registered with a ``raft://`` log store has
its registration in the cluster's log too, so a replica on another machine can read it
there instead of from a shared registry directory.

These are the Raft store's side of the coordinator's ports (the directory of instances,
the commands that publish): the cluster's own errors (``raft.errors.RaftError``) leave
here as the ports' ``LogStoreError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ambrosia_ic.errors import LogStoreError

from ..raft.errors import RaftError
from ..registry.raft_address import RaftAddress

__all__ = ["fetch_registration", "publish_registration"]


@contextlib.contextmanager
def _as_store_error() -> Iterator[None]:
    try:
        yield
    except RaftError as err:
        raise LogStoreError(str(err)) from err


async def publish_registration(address: str | RaftAddress, registration: dict[str, Any],
                               timeout: float = 10.0) -> int:
    """Append ``registration`` (a registration's JSON form) to the cluster's log; the
    newest one of an instance counts. Returns its log index.

    Raises:
        LogStoreError: the cluster did not take it within ``timeout``.
    """
    with _as_store_error():
        from .raft_store import RaftLogStore  # pyzmq: only a raft:// cluster needs it

        store = RaftLogStore(address, registration["instance_name"], timeout=timeout)
        try:
            return await store.register(registration)
        finally:
            store.close()


async def fetch_registration(address: str | RaftAddress, name: str,
                             timeout: float = 10.0) -> dict[str, Any] | None:
    """The newest registration of ``name`` in the cluster's log (None: never published).

    Raises:
        LogStoreError: the cluster could not be read within ``timeout``.
    """
    with _as_store_error():
        from .raft_store import RaftLogStore

        store = RaftLogStore(address, name, timeout=timeout)
        try:
            return await store.registration()
        finally:
            store.close()
