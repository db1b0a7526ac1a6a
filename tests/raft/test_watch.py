"""A standby's watch on the primary (``replication.watch``) against a real link server:
it ends only when the process holding the watched epoch closes it; a primary that holds
another epoch, a replica that holds none, a wrong secret and a silent primary say
nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ambrosia_ic.coordinator.link_server import LinkServer
from ambrosia_ic.replication.watch import PrimaryWatch

from ambrosia_core.ports import free_ports
from tests.launcher import until

SECRET = b"w" * 32


async def _server(tmp: Path, held: list[int | None], lines: list[str]) -> LinkServer:
    server = LinkServer("S", tmp, SECRET, free_ports(1)[0], lambda s: 0,
                        lambda s, rec: None, lines.append)
    server.watch_epoch = lambda: held[0]
    await server.open()
    return server


def test_the_watch_ends_when_the_holder_closes_it_and_only_then(tmp_path: Path) -> None:
    async def main() -> None:
        held: list[int | None] = [3]
        lines: list[str] = []
        server = await _server(tmp_path, held, lines)
        where = {"ic_host": "127.0.0.1", "ic_port": server.port}
        watch = PrimaryWatch("S", SECRET, None)
        watch.follow(3, where)
        await until(lambda: server._watchers, "the watch held open")
        await asyncio.sleep(0.3)  # a silent primary: nothing said
        assert watch.gone is None
        server.drop_watchers()  # as the process's end does
        await until(lambda: watch.gone == 3, "the watch seeing the close")
        watch.stop()
        # Another epoch held there, or none: no watch is held, so no close counts.
        for h in (2, None):
            held[0] = h
            other = PrimaryWatch("S", SECRET, None)
            other.follow(3, where)
            await asyncio.sleep(1.0)  # several attempts (one every 0.1 s)
            assert not server._watchers and other.gone is None
            other.stop()
        assert any("not the primary" in line for line in lines)
        # A peer without the secret is refused, and proves nothing either.
        held[0] = 3
        stranger = PrimaryWatch("S", b"x" * 32, None)
        stranger.follow(3, where)
        await until(lambda: any("failed the link authentication" in line for line in lines),
                    "the stranger refused")
        assert not server._watchers and stranger.gone is None
        stranger.stop()
        server.close()

    asyncio.run(main())
