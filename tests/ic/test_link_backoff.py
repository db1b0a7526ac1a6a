"""A sender's link over real sockets against a receiver that admits it and then drops it:
the waits between attempts keep growing (a connection is not progress), and go back to
the floor only once the receiver acknowledges calls."""

from __future__ import annotations

import asyncio

from ambrosia_ic.links import OutboundLink, challenge, check_hello, hello_reply

from ambrosia_core.wire import Rpc, TrimTo
from tests.launcher import until

SECRET = b"s" * 32


def test_a_receiver_that_drops_each_admitted_link_is_waited_for_until_it_acknowledges(
) -> None:
    async def main() -> None:
        admitted: list[int] = []
        acknowledge = False

        async def receiver(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first, nonce_s = challenge()
            writer.write(first)
            buf = b""
            hello = None
            while hello is None:
                chunk = await reader.read(4096)
                if not chunk:
                    writer.close()
                    return
                buf += chunk
                hello = check_hello(buf, nonce_s, SECRET, "B")
            writer.write(hello_reply(SECRET, hello, nonce_s, 0))
            admitted.append(len(admitted))
            if acknowledge:  # read the record of the call, then say it is logged
                await reader.read(4096)
                writer.write(TrimTo(1).encode())
                await writer.drain()
                await asyncio.sleep(0.05)
            writer.close()

        server = await asyncio.start_server(receiver, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        link = OutboundLink("A", "B", SECRET, lambda: ("127.0.0.1", port), lambda _: None)
        link.add(Rpc(7, 1, b"call").encode())
        link.start()
        try:
            await until(lambda: len(admitted) >= 4, "four admitted connections")
            # Every one was admitted and dropped with nothing acknowledged: a streak.
            assert link.attempts.failures >= 3
            assert link.unacked  # the call waits for a receiver that logs it
            acknowledge = True
            await until(lambda: not link.unacked, "the call acknowledged")
            assert link.attempts.failures == 0
        finally:
            await link.stop()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
