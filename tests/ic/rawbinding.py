"""A test binding that speaks the raw protocol over real sockets, built on the wire codec.

``RawBinding`` is the bare connection: read events, keep every byte received, send
messages. ``CounterApp`` + ``Driver`` make a small deterministic immortal on top of it,
so that replay regenerates exactly the outputs of the original run (which is what the
coordinator's duplicate detection relies on):

- an Impulse to method 5 with args ``b"k"`` makes the app send a Fork to method 1 of
  ``peer`` (itself when ``peer`` is "") with args ``b"<name>:k"``, and note it as sent;
- a call to method 1 is noted as received and answered with a Fork to method 2 of the
  caller, args ``b"ack:" + args``;
- a call to method 2 is noted as acknowledged.

The app's state is its checkpoint (JSON). ``UpgradeTakeCheckpoint`` switches it to
"version 2": the state gains ``version`` and ``v2_handled`` (messages handled by the new
code), so a test can see which code ran and that the state was converted.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Any

from ambrosia_core.wire import (
    CHECKPOINT_SEQ,
    CONTROL_SEQ,
    NEED_DATA,
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    InitialMessage,
    LogRecord,
    LogRecordDecoder,
    OutgoingRpc,
    Rpc,
    RpcType,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    UpgradeService,
    UpgradeTakeCheckpoint,
)

LOOPBACK = "127.0.0.1"


class RawBinding:
    """Connects to the receive port, then the send port, as real bindings do."""

    def __init__(self, receive_port: int, send_port: int, timeout: float = 60.0) -> None:
        self.to_ic = socket.create_connection((LOOPBACK, receive_port), timeout=timeout)
        self.from_ic = socket.create_connection((LOOPBACK, send_port), timeout=timeout)
        self.decoder = LogRecordDecoder()
        self.received = bytearray()  # every byte the coordinator sent
        self._consumed = 0
        self.closed = False

    def next_event(self) -> tuple[Any, bytes]:
        """The next event and the exact bytes it was made from. EOFError at the end."""
        while True:
            start = self.decoder.offset
            ev = self.decoder.next_event()
            if ev is not NEED_DATA:
                return ev, bytes(self.received[start : self.decoder.offset])
            data = self.from_ic.recv(1 << 16)
            if not data:
                self.closed = True
                raise EOFError("the coordinator closed the send connection")
            self.received += data
            self.decoder.receive_data(data)

    def record(self) -> tuple[LogRecord, bytes]:
        ev, raw = self.next_event()
        assert isinstance(ev, LogRecord), f"expected a log record, got {ev!r}"
        return ev, raw

    def checkpoint_bytes(self) -> bytes:
        """The raw bytes that follow a checkpoint record, up to CheckpointEnd."""
        out = bytearray()
        while True:
            ev, _ = self.next_event()
            if isinstance(ev, CheckpointEnd):
                return bytes(out)
            assert isinstance(ev, CheckpointChunk), f"expected checkpoint bytes, got {ev!r}"
            out += ev.data

    def send(self, *messages: Any) -> None:
        self.to_ic.sendall(b"".join(m.encode() for m in messages))

    def send_raw(self, data: bytes) -> None:
        self.to_ic.sendall(data)

    def send_checkpoint(self, blob: bytes) -> None:
        self.to_ic.sendall(Checkpoint(len(blob)).encode() + blob)

    def close(self) -> None:
        for s in (self.to_ic, self.from_ic):
            with contextlib.suppress(OSError):
                s.close()


class CounterApp:
    """The deterministic immortal described in the module docstring."""

    def __init__(self, name: str, peer: str = "") -> None:
        self.name = name
        self.peer = peer
        self.sent: list[str] = []
        self.received: list[str] = []
        self.acked: list[str] = []
        self.initial: list[str] = []
        self.version = 1
        self.v2_handled = 0

    def state(self) -> bytes:
        s: dict[str, Any] = {"sent": self.sent, "received": self.received,
                             "acked": self.acked, "initial": self.initial}
        if self.version == 2:
            s.update(version=2, v2_handled=self.v2_handled)
        return json.dumps(s).encode()

    def load(self, blob: bytes) -> None:
        s = json.loads(blob)
        self.sent, self.received, self.acked = s["sent"], s["received"], s["acked"]
        self.initial = s["initial"]
        self.version = s.get("version", 1)
        self.v2_handled = s.get("v2_handled", 0)

    def upgrade(self) -> None:
        """The state conversion of version 1 -> 2."""
        self.version = 2
        self.v2_handled = 0

    def on_message(self, m: Any) -> list[OutgoingRpc]:
        if self.version == 2:
            self.v2_handled += 1
        if isinstance(m, InitialMessage):
            self.initial.append(m.data.decode())
            return []
        assert isinstance(m, Rpc), m
        if m.method_id == 5:
            tag = f"{self.name}:{m.args.decode()}"
            self.sent.append(tag)
            return [OutgoingRpc(self.peer, 1, RpcType.FORK, tag.encode())]
        if m.method_id == 1:
            tag = m.args.decode()
            self.received.append(tag)
            caller = tag.split(":", 1)[0]
            dest = "" if caller == self.name else caller
            return [OutgoingRpc(dest, 2, RpcType.FORK, b"ack:" + m.args)]
        if m.method_id == 2:
            self.acked.append(m.args.decode()[4:])
            return []
        raise AssertionError(f"unexpected method {m.method_id}")


_EVENT_NAMES: dict[type, str] = {
    UpgradeTakeCheckpoint: "upgrade-take-checkpoint",
    TakeCheckpoint: "take-checkpoint",
    BecomingPrimary: "becoming-primary",
    TakeBecomingPrimaryCheckpoint: "take-becoming-primary-checkpoint",
}


class Driver:
    """Runs a CounterApp over a RawBinding in a thread, through every start-up flow."""

    def __init__(self, binding: RawBinding, app: CounterApp, initial: bytes = b"hello") -> None:
        self.b = binding
        self.app = app
        self.initial = initial
        self.lock = threading.Lock()
        self.records: list[bytes] = []  # raw bytes of every data record received
        self.times: list[float] = []  # time.monotonic() when each record arrived
        self.parsed: list[LogRecord] = []
        self.marks: dict[str, int] = {}  # control event -> number of records before it
        self.events: list[str] = []
        self.error: BaseException | None = None
        self.primary = threading.Event()
        # A control event name ("upgrade-take-checkpoint", ...) at which the binding
        # dies (closes both sockets) instead of answering: a crash at that moment.
        self.die_at: str | None = None
        # How many times the binding asks for another checkpoint while answering a
        # TakeCheckpoint (before its state is sent): a request during a checkpoint.
        self.ask_while_checkpointing = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Driver:
        self.thread.start()
        return self

    def impulse(self, k: int) -> None:
        self.b.send(OutgoingRpc("", 5, RpcType.IMPULSE, str(k).encode()))

    def snapshot(self) -> dict[str, list[str]]:
        with self.lock:
            return {"sent": list(self.app.sent), "received": list(self.app.received),
                    "acked": list(self.app.acked), "initial": list(self.app.initial)}

    def state(self) -> dict[str, Any]:
        with self.lock:
            return dict(json.loads(self.app.state()))

    def _run(self) -> None:
        try:
            while True:
                rec, raw = self.b.record()
                self._handle(rec, raw)
        except (EOFError, OSError):
            pass
        except BaseException as err:  # surfaced by the test through .error
            self.error = err

    def _handle(self, rec: LogRecord, raw: bytes) -> None:
        if rec.seq_id == CHECKPOINT_SEQ:
            blob = self.b.checkpoint_bytes()
            with self.lock:
                self.app.load(blob)
            self.events.append("checkpoint-loaded")
            self.marks["checkpoint-loaded"] = len(self.records)
            return
        if rec.seq_id == CONTROL_SEQ:
            (m,) = rec.messages
            if self.die_at is not None and self.die_at == _EVENT_NAMES.get(type(m)):
                self.events.append(f"died-at-{self.die_at}")
                self.b.close()
                raise EOFError("the binding died on purpose")
            if isinstance(m, TakeBecomingPrimaryCheckpoint):
                self.events.append("take-becoming-primary-checkpoint")
                self.marks["take-becoming-primary-checkpoint"] = len(self.records)
                if "checkpoint-loaded" not in self.events:
                    self.b.send(InitialMessage(self.initial))
                with self.lock:
                    blob = self.app.state()
                self.b.send_checkpoint(blob)
                self.primary.set()
            elif isinstance(m, TakeCheckpoint):
                self.events.append("take-checkpoint")
                self.marks["take-checkpoint"] = len(self.records)
                if self.ask_while_checkpointing:
                    self.ask_while_checkpointing -= 1
                    self.b.send(TakeCheckpoint())
                with self.lock:
                    blob = self.app.state()
                self.b.send_checkpoint(blob)
            elif isinstance(m, UpgradeTakeCheckpoint):
                self.events.append("upgrade-take-checkpoint")
                self.marks["upgrade-take-checkpoint"] = len(self.records)
                with self.lock:
                    self.app.upgrade()
                    blob = self.app.state()
                self.b.send_checkpoint(blob)
                self.primary.set()
            elif isinstance(m, BecomingPrimary):
                self.events.append("becoming-primary")
                self.marks["becoming-primary"] = len(self.records)
                self.primary.set()
            elif isinstance(m, UpgradeService):
                self.events.append("upgrade-service")
                self.marks["upgrade-service"] = len(self.records)
            else:
                raise AssertionError(f"unexpected control message {m!r}")
            return
        self.records.append(raw)
        self.times.append(time.monotonic())
        self.parsed.append(rec)
        outputs: list[OutgoingRpc] = []
        with self.lock:
            for m in rec.messages:
                outputs += self.app.on_message(m)
        if outputs:
            self.b.send(*outputs)
