"""A cluster that cannot be reached reaches the coordinator's ports as the ports' own
error (``LogStoreError``), translated by the Raft store's adapter: what reads through a
port (the directory of instances, the commands that publish) catches no Raft error."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic.coordinator import directory
from ambrosia_ic.errors import LogStoreError
from ambrosia_ic.logstore import registrations
from ambrosia_ic.raft.errors import RaftError

from ambrosia_core.ports import free_ports
from tests.launcher import until


def _nowhere() -> str:
    """A cluster address where no peer listens."""
    return f"raft://127.0.0.1:{free_ports(1)[0]}?secret=s"


def test_the_adapter_turns_the_clusters_errors_into_the_ports() -> None:
    address = _nowhere()
    with pytest.raises(LogStoreError) as got:
        asyncio.run(registrations.fetch_registration(address, "nobody", timeout=0.3))
    assert not isinstance(got.value, RaftError)
    assert isinstance(got.value.__cause__, RaftError)  # the store's own reason, kept
    assert "no leader of the cluster" in str(got.value) and "\n" not in str(got.value)
    with pytest.raises(LogStoreError):
        asyncio.run(registrations.publish_registration(
            address, {"instance_name": "nobody"}, timeout=0.3))


def test_the_directory_logs_an_unreachable_cluster_and_looks_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A destination registered nowhere here waits for its registration from the
    cluster: each failed read is one line, and the lookup goes on (a Raft error that
    escaped the adapter would end the lookup's task instead)."""
    monkeypatch.setattr(directory, "fetch_registration",
                        functools.partial(registrations.fetch_registration, timeout=0.2))
    monkeypatch.setattr(directory, "ADOPT_RETRY", 0.01)
    address = _nowhere()
    said: list[str] = []
    tasks: list[asyncio.Task[Any]] = []

    async def main() -> None:
        def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
            tasks.append(asyncio.get_running_loop().create_task(coro))
            return tasks[-1]

        d = directory.RegistryDirectory(tmp_path / "registry", address, said.append, spawn)
        d.destination("nobody")
        failed = "reading the registration of 'nobody' from raft://127.0.0.1:"
        await until(lambda: sum(line.startswith(failed) for line in said) >= 2 or
                    any(t.done() for t in tasks), "two failed reads logged")
        assert [t for t in tasks if t.done()] == []  # the lookup goes on
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert said[0].startswith("calls to 'nobody' wait for its registration from the "
                              "cluster at raft://127.0.0.1:")
    assert "secret" not in "".join(said)


def test_the_stores_catch_up_raises_the_ports_error() -> None:
    """What a follower of another instance's claims calls (``cluster_primary``): its
    failure is the port's error too, with the cluster's reason kept as the cause."""
    from ambrosia_ic.logstore.raft_store import RaftLogStore

    async def main() -> None:
        store = RaftLogStore(_nowhere(), "nobody", timeout=0.3)
        try:
            await store.catch_up()
        finally:
            store.close()

    with pytest.raises(LogStoreError) as got:
        asyncio.run(main())
    assert not isinstance(got.value, RaftError)
    assert isinstance(got.value.__cause__, RaftError)
