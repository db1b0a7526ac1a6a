"""A peer that speaks AmbrosiaJS's conventions, byte for byte, over a coordinator's ports.

No AmbrosiaJS package can run here, so this binding stands in for one. It frames what it
sends by hand (its own ZigZag varints, not the project's codec), so that a mistake shared
by the codec and the framework cannot hide:

- start-up as AmbrosiaJS does it: the InitialMessage holds its version as raw UTF-8, the
  checkpoint is ``{__ACSv1__}`` followed by JSON;
- Fork RPCs whose arguments are a UTF-8 JSON object (first byte ``{``) or ``0xFF`` + raw
  bytes; Impulses the same with rpc type 2;
- "post" calls: a Fork to method id -1 whose JSON carries ``senderInstanceName``,
  ``destinationInstanceName``, ``methodName``, ``methodVersion``, ``callID`` and
  ``arg:<name>`` fields; results come back as a Fork to -1 named ``<name>_Result`` with the
  same ``callID`` and ``result`` or ``errorMsg``.

Every RPC the coordinator delivers is kept as its exact message bytes (what follows the
message's size varint), so tests can assert the layout the peer saw.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from ambrosia_core.wire import (
    CHECKPOINT_SEQ,
    CONTROL_SEQ,
    BecomingPrimary,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
)
from tests.ic.rawbinding import RawBinding

JS_VERSION = b"2.0.1"
POST = -1
POST_BY_IMPULSE = -2
FORK = 1
IMPULSE = 2
RECORD_HEADER = 24


def zz32(n: int) -> bytes:
    """ZigZag then LEB128, as protobuf's sint32."""
    u = ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_zz32(buf: bytes, pos: int) -> tuple[int, int]:
    shift = u = 0
    while True:
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (u >> 1) ^ -(u & 1), pos


def frame(msg_type: int, data: bytes) -> bytes:
    return zz32(1 + len(data)) + bytes([msg_type]) + data


def outgoing_rpc(dest: str, method_id: int, rpc_type: int, args: bytes) -> bytes:
    """``[size][0x00][zz32 len][dest][0x00 reserved][zz32 method][rpc type][args]``."""
    name = dest.encode("utf-8")
    return frame(0, zz32(len(name)) + name + b"\x00" + zz32(method_id) + bytes([rpc_type])
                 + args)


def json_args(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def split_messages(body: bytes) -> list[bytes]:
    """A record body -> each message's bytes after its size varint (batches unwrapped)."""
    out: list[bytes] = []
    pos = 0
    while pos < len(body):
        size, pos = read_zz32(body, pos)
        msg = body[pos:pos + size]
        pos += size
        if msg[0] in (5, 13):  # RPCBatch / CountReplayableRPCBatchByte
            inner = 1
            _, inner = read_zz32(msg, inner)
            if msg[0] == 13:
                _, inner = read_zz32(msg, inner)
            out += split_messages(msg[inner:])
        else:
            out.append(msg)
    return out


class ReceivedRpc:
    """An RPC as delivered to the peer: the exact bytes, and their fields read by hand."""

    def __init__(self, raw: bytes) -> None:
        assert raw[0] == 0x00, f"not an RPC message: {raw[:8].hex()}"
        self.raw = raw
        self.reserved = raw[1]
        self.method_id, pos = read_zz32(raw, 2)
        self.rpc_type = raw[pos]
        self.args = raw[pos + 1:]

    def json(self) -> dict[str, Any]:
        assert self.args[:1] == b"{", self.args[:16]
        obj = json.loads(self.args.decode("utf-8"))
        assert isinstance(obj, dict)
        return obj


class JsStylePeer:
    """Runs the peer's side in a thread. ``post_handlers`` answer posts by method name
    (raise to answer with ``errorMsg``)."""

    def __init__(self, binding: RawBinding, name: str,
                 post_handlers: dict[str, Callable[..., Any]] | None = None) -> None:
        self.b = binding
        self.name = name
        self.post_handlers = post_handlers or {}
        self.cond = threading.Condition()
        self.rpcs: list[ReceivedRpc] = []
        self.results: dict[int, dict[str, Any]] = {}  # callID -> the _Result post
        self.primary = False
        self.initial_echo: bytes | None = None
        self.error: BaseException | None = None
        self._next_call_id = 1
        self._send_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> JsStylePeer:
        self.thread.start()
        return self

    # ---------------------------------------------------------------- sending
    def send(self, data: bytes) -> None:
        with self._send_lock:
            self.b.send_raw(data)

    def fork(self, dest: str, method_id: int, args: dict[str, Any] | bytes,
             rpc_type: int = FORK) -> None:
        body = json_args(args) if isinstance(args, dict) else b"\xff" + args
        self.send(outgoing_rpc(dest, method_id, rpc_type, body))

    def post(self, dest: str, method: str, **args: Any) -> int:
        """A post call as AmbrosiaJS sends it; returns its callID."""
        with self.cond:
            call_id = self._next_call_id
            self._next_call_id += 1
        body = {"senderInstanceName": self.name, "destinationInstanceName": dest,
                "methodName": method, "methodVersion": 1, "callID": call_id}
        body.update({f"arg:{k}": v for k, v in args.items()})
        self.send(outgoing_rpc(dest, POST, FORK, json_args(body)))
        return call_id

    # ---------------------------------------------------------------- waiting
    def wait(self, cond: Callable[[], Any], what: str, limit: float = 60.0) -> Any:
        """Wait until ``cond()`` is true; ``limit`` only keeps a broken run from hanging."""
        with self.cond:
            ok = self.cond.wait_for(lambda: cond() or self.error is not None, limit)
            if self.error is not None:
                raise AssertionError(f"the peer failed: {self.error!r}")
            if not ok:
                raise AssertionError(f"gave up waiting for {what}")
            return cond()

    def result(self, call_id: int) -> dict[str, Any]:
        return self.wait(lambda: self.results.get(call_id), f"the result of call {call_id}")  # type: ignore[no-any-return]

    def rpcs_to(self, method_id: int) -> list[ReceivedRpc]:
        return [r for r in self.rpcs if r.method_id == method_id]

    # ---------------------------------------------------------------- receiving
    def _run(self) -> None:
        try:
            while True:
                rec, raw = self.b.record()
                if rec.seq_id == CHECKPOINT_SEQ:
                    self.b.checkpoint_bytes()
                    continue
                if rec.seq_id == CONTROL_SEQ:
                    self._control(rec.messages[0])
                    continue
                for msg in split_messages(raw[RECORD_HEADER:]):
                    self._message(msg)
        except (EOFError, OSError):
            pass
        except BaseException as e:  # surfaced by wait()
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def _checkpoint(self) -> bytes:
        with self.cond:
            state = {"next_call_id": self._next_call_id}
        return b"{__ACSv1__}" + json_args(state)

    def _control(self, m: Any) -> None:
        if isinstance(m, TakeBecomingPrimaryCheckpoint):
            blob = self._checkpoint()
            self.send(frame(9, JS_VERSION) + frame(8, zz32(len(blob))) + blob)
            with self.cond:
                self.primary = True
                self.cond.notify_all()
        elif isinstance(m, TakeCheckpoint):
            blob = self._checkpoint()
            self.send(frame(8, zz32(len(blob))) + blob)
        elif isinstance(m, BecomingPrimary):
            with self.cond:
                self.primary = True
                self.cond.notify_all()
        else:
            raise AssertionError(f"unexpected control message {m!r}")

    def _message(self, msg: bytes) -> None:
        if msg[0] == 9:  # the InitialMessage, echoed
            with self.cond:
                self.initial_echo = msg[1:]
                self.cond.notify_all()
            return
        rpc = ReceivedRpc(msg)
        reply = None
        if rpc.method_id in (POST, POST_BY_IMPULSE):
            reply = self._post(rpc.json())
        with self.cond:
            self.rpcs.append(rpc)
            self.cond.notify_all()
        if reply is not None:
            self.send(reply)

    def _post(self, body: dict[str, Any]) -> bytes | None:
        name = body["methodName"]
        if name.endswith("_Result"):
            with self.cond:
                self.results[body["callID"]] = body
            return None
        answer: dict[str, Any] = {
            "senderInstanceName": self.name,
            "destinationInstanceName": body["senderInstanceName"],
            "methodName": f"{name}_Result", "methodVersion": body["methodVersion"],
            "callID": body["callID"]}
        args = {k[4:]: v for k, v in body.items() if k.startswith("arg:")}
        try:
            answer["result"] = self.post_handlers[name](**args)
        except Exception as e:
            answer["errorMsg"] = f"{name} failed: {e}"
        return outgoing_rpc(body["senderInstanceName"], POST, FORK, json_args(answer))
