"""A tiny in-memory coordinator for engine tests: no sockets, no disk.

It speaks just enough of the coordinator's side to drive one ``Engine``: the first-start
flow, echoing the InitialMessage and self-calls back as data records, TakeCheckpoint, and
recovery from a checkpoint it kept. The required end-to-end tests use the real ic-harness.
"""

from __future__ import annotations

from typing import Any

from ambrosia_py.protocol import events as ev
from ambrosia_py.runtime.engine import Engine
from ambrosia_py.wire import (
    NEED_DATA,
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    InitialMessage,
    MessageStreamDecoder,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    encode_checkpoint_record,
    encode_control_record,
    encode_record,
)

CID = 7


class FakeCoordinator:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.decoder = MessageStreamDecoder()
        self.seq = 0
        self.outputs: list[OutgoingRpc] = []
        self.to_self: list[bytes] = []
        self.checkpoint = b""
        self.checkpoints: list[bytes] = []
        self.log: list[bytes] = []  # every data record's messages, in order
        self._ckpt = bytearray()

    # -- coordinator -> binding
    def feed(self, data: bytes) -> None:
        eng = self.engine
        eng.conn.receive_data(data)
        while True:
            event = eng.conn.next_event()
            if event is NEED_DATA:
                break
            if isinstance(event, ev.TakeCheckpoint):
                f, size = eng.write_checkpoint()
                self._from_binding(eng.conn.begin_checkpoint(size)
                                   + eng.conn.checkpoint_data(f.read()))
                continue
            self._from_binding(eng.handle(event))  # type: ignore[arg-type]

    def record(self, *messages: bytes) -> None:
        self.log.append(b"".join(messages))
        self.feed(encode_record(CID, self.seq, b"".join(messages)))
        self.seq += 1

    def rpc(self, method_id: int, rpc_type: int, args: bytes) -> None:
        self.record(Rpc(method_id, rpc_type, args).encode())

    def first_start(self) -> None:
        self.feed(encode_control_record(CID, TakeBecomingPrimaryCheckpoint()))
        self.deliver_self()

    def take_checkpoint(self) -> bytes:
        self.feed(encode_control_record(CID, TakeCheckpoint()))
        return self.checkpoint

    def recover(self, checkpoint: bytes, records: list[bytes], *, primary: bool = True) -> None:
        self.feed(encode_checkpoint_record(CID, len(checkpoint)) + checkpoint)
        for r in records:
            self.record(r)
        if primary:
            self.feed(encode_control_record(CID, BecomingPrimary()))

    def deliver_self(self) -> None:
        """Log every self-call (and the InitialMessage echo) made so far, one per record."""
        while self.to_self:
            self.record(self.to_self.pop(0))

    # -- binding -> coordinator
    def _from_binding(self, data: bytes) -> None:
        if not data:
            return
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
