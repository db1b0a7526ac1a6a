"""An in-memory coordinator: unit-test an immortal without processes, sockets or disk.

It drives one ``Engine`` through the engine's own I/O surface (bytes in with
``receive_data``, outputs out with ``next_output``) and plays just enough of the
coordinator's side: the first start (the InitialMessage echoed back as a logged input),
calls in, every RPC out kept in ``outputs``, self-calls logged back on ``deliver_self``,
checkpoints on demand, and a new life recovered from a checkpoint plus the records
logged after it. The end-to-end tests use the real coordinator; this one is for the
logic of a class::

    from ambrosia_py.testing.inmemory import InMemoryCoordinator

    def test_counter():
        ic = InMemoryCoordinator(Counter)
        ic.first_start()
        ic.send("increment", 5)
        checkpoint = ic.take_checkpoint()
        ic.send("increment", 2)
        again = InMemoryCoordinator(Counter)  # a new life: checkpoint, then the log after it
        again.recover(checkpoint, ic.log[-1:])
        assert again.instance.count == ic.instance.count == 7
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from ambrosia_core.wire import (
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    InitialMessage,
    MessageStreamDecoder,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    RpcType,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    encode_checkpoint_record,
    encode_control_record,
    encode_record,
)

from .. import serialization as ser
from ..context import Runtime
from ..immortal import Immortal
from ..runtime.engine import Engine, SendCheckpoint

__all__ = ["InMemoryCoordinator"]

_COMMIT_ID = 7  # the committer id the records carry (any value serves one instance)


def _engine_is_a_runtime(engine: Engine) -> Runtime:
    """Never called: the type checker proves here that the engine provides the API's
    ``context.Runtime``. The runtime and the API import nothing of each other, so this
    layer above both is the one place that can name the two sides of the arrow."""
    return engine


class InMemoryCoordinator:
    """One immortal instance and a coordinator made of lists.

    Args:
        immortal: the immortal class (an engine is made for it) or a ready ``Engine``.
        name: the instance name, when a class is given.
        config: the instance's configuration (``ctx.config``), when a class is given.

    Attributes:
        engine: the engine under test.
        outputs: every RPC the instance sent (calls, forks, results, Impulses), in order.
        log: every logged record's messages, in order (give a suffix to ``recover``).
        checkpoint: the last checkpoint taken; ``checkpoints``: all of them, in order.
        to_self: self-calls (and the InitialMessage echo) not yet logged back.
    """

    def __init__(self, immortal: type[Immortal] | Engine, name: str = "me", *,
                 config: Mapping[str, Any] | None = None) -> None:
        self.engine = (immortal if isinstance(immortal, Engine)
                       else Engine(immortal, name, config=config))
        self.engine.attach(None, self._wake)  # handlers and Impulses on this thread
        self.decoder = MessageStreamDecoder()
        self.seq = 0
        self.outputs: list[OutgoingRpc] = []
        self.to_self: list[bytes] = []
        self.checkpoint = b""
        self.checkpoints: list[bytes] = []
        self.log: list[bytes] = []
        self._ckpt = bytearray()

    @property
    def instance(self) -> Any:
        """The immortal instance (None before the first start or a recovery)."""
        return self.engine.instance

    # -- coordinator -> binding
    def feed(self, data: bytes) -> None:
        """Bytes from the coordinator's side; everything the engine answers is taken in."""
        self.engine.receive_data(data)
        self.pump()

    def pump(self) -> None:
        """Take in everything the engine has to send now (queued Impulses too)."""
        while (out := self.engine.next_output()) is not None:
            if isinstance(out, SendCheckpoint):
                self._from_binding(b"".join(out.chunks()))
            else:
                self._from_binding(out.data)

    def record(self, *messages: bytes) -> None:
        """Log one record holding ``messages`` and deliver it."""
        self.log.append(b"".join(messages))
        self.feed(encode_record(_COMMIT_ID, self.seq, b"".join(messages)))
        self.seq += 1

    def rpc(self, method_id: int, rpc_type: int, args: bytes) -> None:
        """Deliver one incoming RPC with already encoded arguments."""
        self.record(Rpc(method_id, rpc_type, args).encode())

    def send(self, method: str, *args: Any, caller: str = "tester", call_id: int = -1,
             **kwargs: Any) -> None:
        """Deliver a call of the published ``method`` from instance ``caller``, as another
        Python immortal sends it; with ``call_id`` >= 0 an RPC's result goes to ``outputs``."""
        cls = self.engine.cls
        spec = cls.__ambrosia_methods__[method]
        s = cls.__ambrosia_serializer__
        payload = [[s.dump(a) for a in args], {k: s.dump(v) for k, v in kwargs.items()}]
        body = ser.Envelope(time.time_ns(), int.from_bytes(os.urandom(8)) >> 1, call_id,
                            caller, payload).encode()
        self.rpc(spec.method_id, RpcType.FORK, body)

    def first_start(self) -> None:
        """The first start: InitialMessage, checkpoint, primary, then self-calls logged."""
        self.feed(encode_control_record(_COMMIT_ID, TakeBecomingPrimaryCheckpoint()))
        self.deliver_self()

    def take_checkpoint(self) -> bytes:
        """Ask for a checkpoint; returns it."""
        self.feed(encode_control_record(_COMMIT_ID, TakeCheckpoint()))
        return self.checkpoint

    def recover(self, checkpoint: bytes, records: list[bytes], *, primary: bool = True) -> None:
        """A new life: load ``checkpoint``, replay ``records``, then become primary."""
        self.feed(encode_checkpoint_record(_COMMIT_ID, len(checkpoint)) + checkpoint)
        for r in records:
            self.record(r)
        if primary:
            self.feed(encode_control_record(_COMMIT_ID, BecomingPrimary()))

    def deliver_self(self) -> None:
        """Log every self-call (and the InitialMessage echo) made so far, one per record."""
        self.pump()
        while self.to_self:
            self.record(self.to_self.pop(0))

    # -- binding -> coordinator
    def _wake(self) -> None:
        """An Impulse or a checkpoint request was queued: it waits for the next ``pump``
        (a test decides when outside-world code's messages reach the coordinator)."""

    def _from_binding(self, data: bytes) -> None:
        self.decoder.receive_data(data)
        for m in self.decoder.events():
            self._message(m)

    def _message(self, m: Any) -> None:
        if isinstance(m, InitialMessage):
            self.to_self.append(m.encode())
        elif isinstance(m, RpcBatch):
            for r in m.rpcs:
                self._message(r)
        elif isinstance(m, OutgoingRpc):
            self.outputs.append(m)
            if m.destination == "":
                self.to_self.append(m.incoming().encode())
        elif isinstance(m, Checkpoint):
            self._ckpt = bytearray()
            if m.size == 0:
                self.checkpoint = b""
                self.checkpoints.append(b"")
        elif isinstance(m, CheckpointChunk):
            self._ckpt += m.data
        elif isinstance(m, CheckpointEnd):
            self.checkpoint = bytes(self._ckpt)
            self.checkpoints.append(self.checkpoint)
