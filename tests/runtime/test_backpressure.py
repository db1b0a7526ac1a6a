"""A coordinator that stops reading: the runtime's outgoing buffers stay bounded (the
outside-world thread waits), and once the coordinator reads again every Impulse arrives,
in order. The coordinator here is a raw stand-in over real sockets, so that it can stop
reading at will."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from ambrosia_core.wire import (
    CheckpointEnd,
    InitialMessage,
    MessageStreamDecoder,
    OutgoingRpc,
    RpcBatch,
    RpcType,
    TakeBecomingPrimaryCheckpoint,
    encode_control_record,
    encode_record,
)
from ambrosia_py.runtime.engine import IMPULSE_QUEUE_LIMIT, Engine
from ambrosia_py.runtime.runner import _WRITE_HIGH_WATER, ImmortalRunner
from ambrosia_py.serialization import Envelope
from tests.launcher import wait_until

from .apps import FLOOD, FLOOD_PAD, Flooder

CID = 11
_RECV_TIMEOUT = 10.0  # seconds without bytes before the test says what is stuck


def _flooded(m: object, seen: list[int]) -> None:
    """Add the flood's numbers that message ``m`` carries to ``seen``."""
    rpcs = m.rpcs if isinstance(m, RpcBatch) else [m]
    for r in rpcs:
        assert isinstance(r, OutgoingRpc) and r.rpc_type == RpcType.IMPULSE, r
        args, _ = Envelope.decode(r.args).payload
        assert args[1] == b"p" * FLOOD_PAD
        seen.append(args[0])


def _listen() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def test_a_coordinator_that_stops_reading_bounds_the_buffers_and_loses_nothing() -> None:
    lr, ls = _listen(), _listen()
    engine = Engine(Flooder, "flooder")
    runner = ImmortalRunner(engine, lr.getsockname()[1], ls.getsockname()[1], progress=False)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(runner.run(),),
                              daemon=True)
    thread.start()
    receive, _ = lr.accept()  # binding -> coordinator: the socket we stop reading
    send, _ = ls.accept()
    decoder = MessageStreamDecoder()
    try:
        send.sendall(encode_control_record(CID, TakeBecomingPrimaryCheckpoint()))
        initial = None
        checkpointed = False
        # The flood starts as the instance becomes primary, right after the first
        # checkpoint: its first Impulses may come in the same read as the checkpoint's end.
        seen: list[int] = []
        while not checkpointed:  # the InitialMessage, then the first checkpoint
            decoder.receive_data(receive.recv(1 << 16))
            for m in decoder.events():
                if checkpointed:
                    _flooded(m, seen)
                elif isinstance(m, InitialMessage):
                    initial = m
                checkpointed = checkpointed or isinstance(m, CheckpointEnd)
        assert initial is not None
        send.sendall(encode_record(CID, 0, initial.encode()))
        # Now the immortal floods and the coordinator reads nothing: the sender must stall.
        wait_until(lambda: engine.blocked_senders > 0, "the flooding thread to wait for room")
        inst = engine.instance
        assert isinstance(inst, Flooder)
        # Stalled for good, not just for a moment: the kernel's socket buffers and the
        # runner's write buffer are full, so nothing moves for half a second.
        stalled_at, still = -1, 0
        deadline = time.monotonic() + 60
        while still < 5 and inst._accepted < FLOOD and time.monotonic() < deadline:
            time.sleep(0.1)
            now = inst._accepted
            still = still + 1 if now == stalled_at and engine.blocked_senders else 0
            stalled_at = now
        total = FLOOD * (FLOOD_PAD + 40)
        assert stalled_at < FLOOD and total > 10 * (IMPULSE_QUEUE_LIMIT + _WRITE_HIGH_WATER)
        # Reading resumes: everything arrives, in order.
        receive.settimeout(_RECV_TIMEOUT)
        while len(seen) < FLOOD:
            try:
                data = receive.recv(1 << 20)
            except TimeoutError:
                raise AssertionError(
                    f"no bytes for {_RECV_TIMEOUT}s after {len(seen)} of {FLOOD} Impulses: "
                    f"{inst._accepted} accepted, {len(engine.outbox._impulses)} still queued, "
                    f"{runner.peak_write_buffer} bytes at most in the write buffer, first "
                    "missing: "
                    f"{sorted(set(range(FLOOD)) - set(seen))[:3]}") from None
            assert data, "the binding closed its connection"
            decoder.receive_data(data)
            for m in decoder.events():
                _flooded(m, seen)
        assert seen == list(range(FLOOD))
        wait_until(lambda: inst._accepted == FLOOD, "the flooding thread to finish")
        # The whole time, the buffers held about a megabyte each, never the whole flood.
        one = FLOOD_PAD + 64
        assert engine.peak_queued_bytes <= IMPULSE_QUEUE_LIMIT + one
        assert runner.peak_write_buffer <= _WRITE_HIGH_WATER + IMPULSE_QUEUE_LIMIT + 2 * one
    finally:
        loop.call_soon_threadsafe(runner.stop)
        thread.join(30)
        for s in (receive, send, lr, ls):
            s.close()
        loop.close()
