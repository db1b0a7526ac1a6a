"""The deterministic core: protocol events in, user code run, outgoing RPCs and
checkpoints out. No sockets (``runner`` owns them); everything here runs on one thread.

Handlers' coroutines are driven by hand rather than by asyncio: a handler may only await
calls to immortals (``PendingCall``), and it resumes synchronously while the input that
carries the call's result is being handled. That keeps every step a function of the log.

Pending awaits and checkpoints: a suspended coroutine cannot be serialized. The engine
keeps, in memory, the serialized state from the last moment no handler was suspended (the
quiescent snapshot) and every input dispatched since. A checkpoint taken while handlers are
suspended stores that snapshot plus those inputs; loading it re-dispatches the inputs with
all outgoing sends suppressed (they reached the coordinator before the checkpoint), which
rebuilds the same suspended coroutines. A checkpoint taken while quiescent is just the
state. The cost: one serialization of the state each time a handler that can suspend (an
``async def`` whose body awaits, found from its bytecode) starts while none is suspended,
and memory for the inputs handled while any is.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import IO, Any

import msgpack
import xxhash

from .. import serialization as ser
from ..context import ImmortalContext
from ..errors import (
    AlreadyUpgradedError,
    ImpulseDuringRecoveryError,
    LocalProtocolError,
    RemoteCallError,
    SerializationError,
    UnknownMethodError,
)
from ..immortal import (
    POST_BY_IMPULSE_METHOD_ID,
    POST_METHOD_ID,
    RESULT_METHOD_ID,
    Immortal,
    MethodKind,
    MethodSpec,
    PendingCall,
)
from ..protocol import BindingConnection
from ..protocol import events as ev
from ..wire import NEED_DATA, OutgoingRpc, Rpc, RpcType
from . import checkpoint as ckpt
from . import jsconv, replaylog
from .handling import CurrentInput
from .journal import Journal
from .outbox import IMPULSE_QUEUE_LIMIT, Outbox
from .outputs import Output, SendBytes, SendCheckpoint
from .stepping import Done, Handlers

__all__ = ["CHECKPOINT_FORMAT", "IMPULSE_QUEUE_LIMIT", "CurrentInput", "Engine", "Output",
           "SendBytes", "SendCheckpoint"]

CHECKPOINT_FORMAT = ckpt.CHECKPOINT_FORMAT

_INITIAL_MAGIC = "ambrosia-py"
# RPC bytes gathered into one output before it is handed out (a long replay's results).
_BATCH_BYTES = 1 << 20


class Engine:
    """Runs one immortal instance against a ``BindingConnection``.

    Args:
        cls: the immortal class (VCurrent).
        instance_name: the registered instance name.
        upgrade_to: VNext, used when the coordinator asks for an upgrade.
        convert: the state conversion VCurrent -> VNext (default ``upgrade_to.upgrade_from``).
        record_outputs: keep every RPC sent, in order (for repro tests).
        log_replay: show ``ctx.log`` lines (marked ``[replay] ``) and handler failures
            logged while replaying, instead of dropping them; default: the environment
            variable ``AMBROSIA_LOG_REPLAY``.
    """

    def __init__(
        self,
        cls: type[Immortal],
        instance_name: str,
        *,
        upgrade_to: type[Immortal] | None = None,
        convert: Callable[[Any], Immortal] | None = None,
        record_outputs: bool = False,
        logger: logging.Logger | None = None,
        log_replay: bool | None = None,
    ) -> None:
        for c in (cls, upgrade_to):
            if c is not None and not (isinstance(c, type) and issubclass(c, Immortal)):
                raise TypeError(f"{c!r} is not an Immortal subclass")
        self.cls = cls
        self.instance_name = instance_name
        self.upgrade_to = upgrade_to
        self.convert = convert
        self.log = logger or logging.getLogger(f"ambrosia.{instance_name}")
        self.log_replay = replaylog.log_replay_from_env() if log_replay is None else log_replay
        # What handlers log (ctx.log, their failures): quiet or marked while they handle a
        # replayed input. Lifecycle hooks (loading a checkpoint, ...) run once per life.
        self.user_log = replaylog.ReplayAwareLogger(
            self.log, lambda: self.is_replaying and self.current_input is not None,
            lambda: self.log_replay)
        self.conn = BindingConnection(instance_name)
        self.instance: Immortal | None = None
        self.outputs: list[OutgoingRpc] | None = [] if record_outputs else None
        self.current_input: CurrentInput | None = None
        self.outbox = Outbox(self.outputs)
        self.checkpoints_taken = 0
        self.last_checkpoint_size = 0
        # Checkpointed framework state.
        self._next_call_id = 1
        self._last_ts = 0
        self._inputs_seen = 0
        # Volatile: rebuilt from checkpoints and replay.
        self.handlers = Handlers(self.user_log)
        self._journal = Journal()  # what checkpoints carry while handlers are suspended
        self._suppress = False
        self._batch: list[OutgoingRpc] = []
        self._ckpt_in: IO[bytes] | None = None
        self._ckpt_out: SendCheckpoint | None = None  # handed out, maybe not yet all sent
        self._held: SendCheckpoint | None = None  # taken, to hand out after earlier bytes
        self._loaded_upgraded = False  # the checkpoint loaded was already upgrade_to's
        # Each method's positional parameter types, looked up once rather than per call.
        self._positional_types: dict[Callable[..., Any], list[Any]] = {}

    # ------------------------------------------------------------ properties
    @property
    def is_primary(self) -> bool:
        return self.conn.is_primary

    @property
    def is_replaying(self) -> bool:
        return self.conn.is_replaying or self._suppress

    @property
    def quiescent(self) -> bool:
        """No handler is suspended on an awaited call."""
        return self.handlers.suspended == 0

    @property
    def pending_calls(self) -> int:
        return len(self.handlers.pending)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self.outbox.loop

    @property
    def peak_queued_bytes(self) -> int:
        """The most Impulse bytes ever queued at once."""
        return self.outbox.peak_queued_bytes

    @property
    def blocked_senders(self) -> int:
        """Outside-world threads waiting for room in the Impulse queue now."""
        return self.outbox.blocked_senders

    @property
    def serializer(self) -> ser.Serializer:
        return self.cls.__ambrosia_serializer__

    def _attach(self, inst: Immortal) -> Immortal:
        object.__setattr__(inst, "_ambrosia_ctx", ImmortalContext(self, self.instance_name,
                                                                   self.user_log))
        return inst

    # ------------------------------------------------------------ the I/O surface
    def attach(self, loop: asyncio.AbstractEventLoop | None, wakeup: Callable[[], None]
               ) -> None:
        """Drive the engine from the calling thread (handlers run on it).

        Args:
            loop: the event loop side effects (``ctx.spawn``) run on, if any.
            wakeup: called on this thread when outside-world code queued something to
                send: call ``next_output`` then.
        """
        self.outbox.attach(loop, wakeup)

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the coordinator's send port; act on them with ``next_output``."""
        self.conn.receive_data(data)

    def next_output(self) -> Output | None:
        """Handle the events received so far and return the next thing to send: bytes, or a
        checkpoint to stream (all of it, before calling again). None: nothing until more
        data is received or ``wakeup`` is called."""
        if self._ckpt_out is not None and not self._ckpt_out.done:
            raise LocalProtocolError("the checkpoint handed out was not sent to its end")
        if self._held is not None:
            self._ckpt_out, self._held = self._held, None
            return self._ckpt_out
        pending = bytearray()
        conn = self.conn
        while True:
            event = conn.next_event()
            if event is NEED_DATA:
                break
            if type(event) is ev.TakeCheckpoint:
                taken = self._take_checkpoint(event.reason)
                if pending:  # what came before the checkpoint goes first
                    self._held = taken
                    return SendBytes(bytes(pending))
                self._ckpt_out = taken
                return taken
            out = self._handle(event)  # type: ignore[arg-type]
            if out:
                pending += out
                if len(pending) >= _BATCH_BYTES:
                    return SendBytes(bytes(pending))
        if not conn.owes_checkpoint and conn.is_primary:
            pending += self._take_outbox()
        return SendBytes(bytes(pending)) if pending else None

    def _take_outbox(self) -> bytes:
        """Impulses and checkpoint requests queued by outside-world code, encoded."""
        impulses, raw = self.outbox.take()
        out = self.conn.send_rpcs(impulses) if impulses else b""
        return out + b"".join(raw)

    def _take_checkpoint(self, reason: ev.CheckpointReason) -> SendCheckpoint:
        f, size = self._write_checkpoint()
        return SendCheckpoint(self.conn, f, size, reason, self.log)

    # ------------------------------------------------------------ events
    def _handle(self, event: ev.ProtocolEvent) -> bytes:
        """Handle one protocol event other than ``TakeCheckpoint``; the bytes to send."""
        kind = type(event)
        if kind is ev.IncomingRpc:
            self._input(("r", event.rpc.method_id, event.rpc.rpc_type,  # type: ignore[union-attr]
                         event.rpc.args, event.rpc.reserved))  # type: ignore[union-attr]
            return self._encode_batch()
        if kind is ev.InitialMessageReceived:
            self._input(("i", event.data))  # type: ignore[union-attr]
            return self._encode_batch()
        if kind is ev.FirstStart:
            self.log.info("first start: sending the InitialMessage")
            self.instance = self._attach(self.cls())
            header = [_INITIAL_MAGIC, time.time_ns(), int.from_bytes(os.urandom(8)) >> 1]
            return self.conn.send_initial_message(msgpack.packb(header))
        if kind is ev.CheckpointLoadStarted:
            self.log.info("recovering: loading a checkpoint of %d bytes",
                          event.size)  # type: ignore[union-attr]
            # Closed once the checkpoint is loaded.
            self._ckpt_in = tempfile.SpooledTemporaryFile(max_size=ckpt.SPOOL_MAX)  # noqa: SIM115
            return b""
        if kind is ev.CheckpointLoadChunk:
            assert self._ckpt_in is not None
            self._ckpt_in.write(event.data)  # type: ignore[union-attr]
            return b""
        if kind is ev.CheckpointLoaded:
            assert self._ckpt_in is not None
            f, self._ckpt_in = self._ckpt_in, None
            try:
                f.seek(0)
                self._load_checkpoint(f)
            finally:
                f.close()
            out = self._encode_batch()
            assert self.instance is not None
            self.instance.on_checkpoint_loaded()
            return out
        if kind is ev.UpgradeRequested:
            self._upgrade(event.live)  # type: ignore[union-attr]
            return b""
        if kind is ev.RecoveryComplete:
            n = event.records_replayed  # type: ignore[union-attr]
            self.log.info("recovery complete: %d records replayed", n)
            assert self.instance is not None
            self.instance.on_recovery_complete(n)
            return b""
        if kind is ev.BecamePrimary:
            self.log.info("became primary%s", " after recovery" if event.recovered else "")  # type: ignore[union-attr]
            assert self.instance is not None
            self.instance.on_become_primary()
            return b""
        raise LocalProtocolError(f"unexpected protocol event {event!r}")

    def _encode_batch(self) -> bytes:
        if not self._batch:
            return b""
        batch, self._batch = self._batch, []
        return self.conn.send_rpcs(batch)

    # ------------------------------------------------------------ inputs
    def _input(self, record: tuple[Any, ...]) -> None:
        if self.handlers.suspended == 0 and self._may_suspend(record):
            self._journal.begin(self._state_bytes())
        if self._journal.active:
            self._journal.add(record)
        self._apply(record)
        if self.handlers.suspended == 0:
            self._journal.clear()

    def _may_suspend(self, record: tuple[Any, ...]) -> bool:
        if record[0] == "i":
            assert self.instance is not None
            hook = type(self.instance).on_first_start
            return inspect.iscoroutinefunction(hook)
        method_id = record[1]
        if method_id == RESULT_METHOD_ID:
            return False
        if method_id in (POST_METHOD_ID, POST_BY_IMPULSE_METHOD_ID):
            return True  # a JSON post may name any method; be safe
        spec = self.cls.__ambrosia_by_id__.get(method_id)
        return spec is not None and spec.may_suspend

    def _apply(self, record: tuple[Any, ...]) -> None:
        self._inputs_seen += 1
        try:
            if record[0] == "i":
                self._apply_initial(record[1])
            else:
                self._apply_rpc(Rpc(record[1], record[2], record[3], record[4]))
            if self.handlers.suspended:
                self._check_journal()
        finally:
            self.current_input = None

    def _check_journal(self) -> None:
        """Warn when the journal passes the class's threshold; past its limit, fail the
        suspended awaits, oldest first, until none is left (only then can it be dropped).
        A function of the log: a replay does the same at the same input."""
        j, cls = self._journal, self.cls
        if j.warning_due(cls.journal_warning_bytes):
            self.user_log.warning("%s", j.warning(self.handlers.suspended_names(),
                                                  cls.journal_warning_bytes))
        if not j.over(cls.journal_limit_bytes):
            return
        self.handlers.abandon_oldest(lambda call: j.limit_error(call, cls.journal_limit_bytes))

    def _apply_initial(self, data: bytes) -> None:
        try:
            magic, ts, entropy = msgpack.unpackb(data)
            if magic != _INITIAL_MAGIC:
                raise ValueError(magic)
        except Exception:
            ts, entropy = self._last_ts, xxhash.xxh64_intdigest(data) >> 1
        self._enter(ts, entropy)
        self.log.info("first start: running on_first_start%s",
                      " (replayed)" if self.is_replaying else "")
        assert self.instance is not None
        self.handlers.start(self.instance.on_first_start, (), {}, "on_first_start",
                            self.handlers.log_failure)

    def _enter(self, ts: int, entropy: int) -> CurrentInput:
        self._last_ts = max(self._last_ts, ts)
        self.current_input = CurrentInput(ts, entropy)
        return self.current_input

    def _enter_derived(self, args: bytes) -> CurrentInput:
        """Header of an input that carries none (AmbrosiaJS's): a function of the log."""
        return self._enter(self._last_ts, xxhash.xxh64_intdigest(args, seed=self._inputs_seen)
                           >> 1)

    def _apply_rpc(self, rpc: Rpc) -> None:
        if rpc.reserved:
            self.log.error("ignoring an RPC in the C# binding's result form (reserved byte %d)",
                           rpc.reserved)
            return
        mid, args = rpc.method_id, rpc.args
        if mid == RESULT_METHOD_ID:
            self._apply_result(args)
            return
        if mid in (POST_METHOD_ID, POST_BY_IMPULSE_METHOD_ID):
            self._apply_post(args)
            return
        spec = self.cls.__ambrosia_by_id__.get(mid)
        if spec is None:
            self._enter_derived(args)
            self.handlers.log_failure(None, UnknownMethodError(
                f"{self.cls.__qualname__} publishes no method with id {mid}"))
            return
        on_done: Done = self.handlers.log_failure
        try:
            if ser.is_envelope(args):
                env = ser.Envelope.decode(args)
                self._enter(env.timestamp_ns, env.entropy)
                if env.call_id >= 0 and spec.kind is MethodKind.RPC:
                    on_done = self._result_sender(spec.name, env.caller, env.call_id)
                pos, kw = self._decode_payload(spec, env.payload)
            elif args[:1] == b"{":
                self._enter_derived(args)
                pos, kw = (), self._load_json_kwargs(
                    spec, jsconv.fork_kwargs(ser.decode_json_args(args)))
            elif args[:1] == bytes([ser.RAW_BYTES_MARKER]):
                self._enter_derived(args)
                pos, kw = (ser.decode_raw_args(args),), {}
            else:
                self._enter_derived(args)
                raise SerializationError(f"arguments of {spec.name} are in no known form")
        except SerializationError as e:
            on_done(None, e)
            return
        self.handlers.start(getattr(self.instance, spec.name), pos, kw, spec.name, on_done)

    def _load_json_kwargs(self, spec: MethodSpec, kw: dict[str, Any]) -> dict[str, Any]:
        """JSON arguments (AmbrosiaJS's) as the parameters' annotated types."""
        s = self.serializer
        return {k: s.load(v, spec.param_type(k)) for k, v in kw.items()}

    def _decode_payload(self, spec: MethodSpec, payload: Any) -> tuple[tuple[Any, ...],
                                                                       dict[str, Any]]:
        if not (isinstance(payload, list) and len(payload) == 2
                and isinstance(payload[0], list) and isinstance(payload[1], dict)):
            raise SerializationError(f"arguments of {spec.name} are not [args, kwargs]")
        types = self._positional_types.get(spec.func)
        if types is None:
            params = list(spec.signature.parameters.values())[1:]
            types = self._positional_types[spec.func] = [spec.param_type(p.name)
                                                         for p in params]
        load = self.serializer.load
        args, named = payload
        if len(args) <= len(types):  # the usual case: every argument has its type
            pos = tuple(map(load, args, types))
        else:
            pos = tuple(load(v, types[i] if i < len(types) else ser.inspect_empty)
                        for i, v in enumerate(args))
        if not named:
            return pos, {}
        return pos, {k: load(v, spec.param_type(k)) for k, v in named.items()}

    def _apply_result(self, args: bytes) -> None:
        env = ser.Envelope.decode(args)
        self._enter(env.timestamp_ns, env.entropy)
        pc = self.handlers.take(env.call_id)
        if pc is None:
            self.log.warning("a result for call %d, which is not pending, was ignored",
                             env.call_id)
            return
        try:
            ok, value = env.payload
            if ok:
                pc.resolve(self.serializer.load(value, pc.result_type))
            else:
                pc.resolve(error=self._remote_error(pc, value))
        except (SerializationError, ValueError, TypeError) as e:
            pc.resolve(error=e if isinstance(e, SerializationError) else
                       SerializationError(f"malformed result of {pc.method}: {e}"))
        self.handlers.resume(pc)

    def _remote_error(self, pc: PendingCall[Any], value: Any) -> BaseException:
        type_name, message = str(value[0]), str(value[1])
        for t in pc.remote_errors:
            if t.__name__ == type_name:
                try:
                    return t(message)
                except Exception:
                    break
        return RemoteCallError(message, type_name)

    # ------------------------------------------------------------ AmbrosiaJS posts
    def _apply_post(self, args: bytes) -> None:
        self._enter_derived(args)
        try:
            obj = ser.decode_json_args(args)
            name = obj["methodName"]
            call_id = obj.get("callID", -1)
        except (SerializationError, KeyError) as e:
            self.handlers.log_failure(None, SerializationError(f"malformed post call: {e}"))
            return
        spec = self.cls.__ambrosia_methods__.get(name)
        if spec is None and isinstance(name, str) and name.endswith("_Result"):
            pc = self.handlers.take(call_id)
            if pc is None:
                self.log.warning("a post result for call %r, which is not pending, was ignored",
                                 call_id)
                return
            if "errorMsg" in obj:
                pc.resolve(error=RemoteCallError(str(obj["errorMsg"]), "Error"))
            else:
                pc.resolve(jsconv.post_result(obj))
            self.handlers.resume(pc)
            return
        sender = obj.get("senderInstanceName", "")
        on_done: Done = self.handlers.log_failure
        if obj.get("resultRequired", True) and sender:
            on_done = self._post_result_sender(sender, name, call_id,
                                               spec.return_type if spec else None)
        if spec is None:
            on_done(None, UnknownMethodError(f"{self.cls.__qualname__} publishes no method "
                                             f"{name!r}"))
            return
        try:
            kwargs = self._load_json_kwargs(spec, jsconv.post_kwargs(obj))
        except SerializationError as e:
            on_done(None, e)
            return
        self.handlers.start(getattr(self.instance, spec.name), (), kwargs, spec.name, on_done)

    def _post_result_sender(self, sender: str, name: str, call_id: Any, return_type: Any
                            ) -> Done:
        def send(value: Any, error: BaseException | None) -> None:
            body = jsconv.result_body(self.instance_name, sender, name, call_id)
            if error is None:
                try:
                    body["result"] = jsconv.result_value(value, self.serializer.dump(value),
                                                         return_type)
                    data = ser.encode_json_args(body)
                except SerializationError as e:
                    error = e
            if error is not None:
                replaylog.log_rpc_failure(self.user_log, name, sender, call_id, error,
                                          posted=True)
                body.pop("result", None)
                body["errorMsg"] = f"{type(error).__name__}: {error}"
                data = ser.encode_json_args(body)
            self._send(sender, POST_METHOD_ID, RpcType.FORK, data)

        return send

    # ------------------------------------------------------------ result senders
    def _result_sender(self, method: str, caller: str, call_id: int
                       ) -> Done:
        def send(value: Any, error: BaseException | None) -> None:
            if error is None:
                try:
                    payload: list[Any] = [True, self.serializer.dump(value)]
                except SerializationError as e:
                    error = e
            if error is not None:
                if not isinstance(error, Exception):
                    raise error
                if not replaylog.declared(error, self.cls.remote_errors):
                    replaylog.log_rpc_failure(self.user_log, method, caller, call_id, error)
                payload = [False, [type(error).__name__, str(error)]]
            self._send_envelope(caller, RESULT_METHOD_ID, RpcType.FORK, call_id, payload)

        return send

    # ------------------------------------------------------------ sending
    def _require_handler(self, what: str) -> CurrentInput:
        cur = self.current_input
        if cur is None or not self.outbox.on_engine_thread():
            raise LocalProtocolError(
                f"{what} is only possible while handling a logged input (in a published method "
                "or on_first_start); outside-world code sends Impulses: proxy.method.impulse()"
            )
        return cur

    def _send(self, dest: str, method_id: int, rpc_type: int, args: bytes) -> None:
        if self._suppress:
            return
        rpc = OutgoingRpc(dest, method_id, int(rpc_type), args)
        self._batch.append(rpc)
        if self.outputs is not None:
            self.outputs.append(rpc)

    def _send_envelope(self, dest: str, method_id: int, rpc_type: int, call_id: int,
                       payload: Any) -> None:
        cur = self._require_handler("sending an RPC")
        ts, entropy = cur.derive()
        body = ser.Envelope(ts, entropy, call_id, self.instance_name, payload).encode()
        self._send(dest, method_id, rpc_type, body)

    def _payload(self, spec: MethodSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            spec.signature.bind(None, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{spec.name}(): {e}") from None
        s = self.serializer
        return [[s.dump(a) for a in args], {k: s.dump(v) for k, v in kwargs.items()}]

    def call(self, dest: str, cls: type[Immortal], spec: MethodSpec, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> PendingCall[Any]:
        """An awaited call: sends it now, returns what the handler awaits."""
        self._require_handler(f"calling {spec.name}")
        payload = self._payload(spec, args, kwargs)
        call_id = self._next_call_id
        self._next_call_id += 1
        pc: PendingCall[Any] = PendingCall(call_id, spec.name, spec.return_type,
                                           cls.remote_errors)
        self.handlers.add(pc)
        self._send_envelope(dest, spec.method_id, RpcType.FORK, call_id, payload)
        return pc

    def fork(self, dest: str, spec: MethodSpec, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> None:
        self._require_handler(f"forking {spec.name}")
        self._send_envelope(dest, spec.method_id, RpcType.FORK, -1,
                            self._payload(spec, args, kwargs))

    def _check_impulse(self, what: str) -> None:
        if not self.conn.is_primary:
            raise ImpulseDuringRecoveryError(
                f"{what}: an Impulse cannot be sent before the instance is primary "
                "(it would not be a logged input on replay); start outside-world code in "
                "on_become_primary()"
            )
        if self.current_input is not None and self.outbox.on_engine_thread():
            raise LocalProtocolError(
                f"{what}: a handler cannot send an Impulse (Impulses come from the outside "
                "world); use proxy.method(...) or .fork(...)"
            )

    def impulse(self, dest: str, spec: MethodSpec, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> None:
        """Thread-safe: queue an Impulse from outside-world code."""
        self._check_impulse(f"impulse {spec.name}")
        body = ser.Envelope(time.time_ns(), int.from_bytes(os.urandom(8)) >> 1, -1,
                            self.instance_name, self._payload(spec, args, kwargs)).encode()
        self.outbox.queue_impulse(OutgoingRpc(dest, spec.method_id, RpcType.IMPULSE, body))

    @staticmethod
    def _raw_args(args: dict[str, Any] | bytes) -> bytes:
        if isinstance(args, (bytes, bytearray, memoryview)):
            return ser.encode_raw_args(bytes(args))
        return ser.encode_json_args(args)

    def post(self, dest: str, method_name: str, args: dict[str, Any]) -> PendingCall[Any]:
        self._require_handler(f"posting {method_name}")
        call_id = self._next_call_id
        self._next_call_id += 1
        body = jsconv.call_body(self.instance_name, dest, method_name, call_id,
                                {k: self.serializer.dump(v) for k, v in args.items()})
        pc: PendingCall[Any] = PendingCall(call_id, method_name)
        self.handlers.add(pc)
        self._send(dest, POST_METHOD_ID, RpcType.FORK, ser.encode_json_args(body))
        return pc

    def fork_raw(self, dest: str, method_id: int, args: dict[str, Any] | bytes) -> None:
        self._require_handler(f"forking method {method_id}")
        self._send(dest, method_id, RpcType.FORK, self._raw_args(args))

    def impulse_raw(self, dest: str, method_id: int, args: dict[str, Any] | bytes) -> None:
        self._check_impulse(f"impulse to method {method_id}")
        self.outbox.queue_impulse(OutgoingRpc(dest, method_id, RpcType.IMPULSE,
                                              self._raw_args(args)))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        if not self.conn.is_primary:
            coro.close()
            raise LocalProtocolError(
                "side effects (ctx.spawn) may only start when primary, with a running runtime"
            )
        return self.outbox.spawn(coro)

    def request_checkpoint(self) -> None:
        self.outbox.queue_raw(self.conn.request_checkpoint())

    async def stop_tasks(self) -> None:
        """Refuse further Impulses and cancel the side-effect tasks (the runner stops)."""
        await self.outbox.close()

    # ------------------------------------------------------------ checkpoints
    def _framework_state(self) -> dict[str, Any]:
        return {"next_call_id": self._next_call_id, "last_ts": self._last_ts,
                "inputs_seen": self._inputs_seen}

    def _state_bytes(self) -> bytes:
        assert self.instance is not None
        return ckpt.state_bytes(self.instance, self._framework_state())

    def _write_checkpoint(self) -> tuple[IO[bytes], int]:
        """The checkpoint, in a (spooled) temporary file positioned at 0, and its size."""
        f = tempfile.SpooledTemporaryFile(max_size=ckpt.SPOOL_MAX)  # noqa: SIM115 - caller closes
        assert self.instance is not None
        try:
            if self.handlers.suspended == 0:
                f.write(ckpt.header(self.instance, "q"))
                ckpt.write_state(self.instance, self._framework_state(), f)
            else:
                assert self._journal.snapshot is not None
                f.write(ckpt.header(self.instance, "p"))
                f.write(self._journal.snapshot)
                f.write(msgpack.packb(self._journal.records, use_bin_type=True))
            size = f.tell()
            f.seek(0)
        except BaseException:
            f.close()
            raise
        self.checkpoints_taken += 1
        self.last_checkpoint_size = size
        return f, size

    def _load_checkpoint(self, f: IO[bytes]) -> None:
        objects = ckpt.read_objects(f)
        try:
            header = next(objects)
            mode = header["mode"]
            cls_name, version = header["class"], header["version"]
        except (StopIteration, KeyError, TypeError, ValueError) as e:
            raise SerializationError(f"the checkpoint has no valid header ({e})") from e
        except Exception as e:
            raise SerializationError(f"the checkpoint is not valid msgpack ({e})") from e
        target = self.upgrade_to
        if target is not None and (cls_name, version) == (target.__qualname__, target.version):
            self.log.info("the checkpoint is already %s version %d: running it", cls_name,
                          version)
            self.cls, self.upgrade_to = target, None
            self._loaded_upgraded = True
        elif (cls_name, version) != (self.cls.__qualname__, self.cls.version):
            raise SerializationError(
                f"the checkpoint holds {cls_name} version {version}, but the code is "
                f"{self.cls.__qualname__} version {self.cls.version}; to change versions, "
                "register an upgrade and run with the new class as the upgrade target"
            )
        self._read_state(objects)
        if mode == "p":
            inputs = next(objects)
            self._journal.begin(self._state_bytes())
            self.log.info("re-dispatching %d inputs to rebuild suspended calls", len(inputs))
            self._suppress = True
            try:
                for record in inputs:
                    self._journal.add(record)
                    self._apply(tuple(record))
            finally:
                self._suppress = False
            if self.handlers.suspended == 0:
                self._journal.clear()

    def _read_state(self, objects: Iterator[Any]) -> None:
        fw, self.instance = ckpt.read_state(self.cls, objects, self._attach)
        self._next_call_id = fw["next_call_id"]
        self._last_ts = fw["last_ts"]
        self._inputs_seen = fw["inputs_seen"]

    # ------------------------------------------------------------ upgrade
    def _upgrade(self, live: bool) -> None:
        new_cls = self.upgrade_to
        if new_cls is None and self._loaded_upgraded and not live:
            raise AlreadyUpgradedError(
                f"the checkpoint already holds {self.cls.__qualname__} version "
                f"{self.cls.version} (the instance was upgraded live): an upgrade test "
                "replays a checkpoint of the version before the upgrade")
        if new_cls is None:
            raise LocalProtocolError(
                "the coordinator asked for an upgrade, but no VNext class was given "
                "(ambrosia run ... --upgrade-to MODULE:CLASS)"
            )
        old = self.instance
        assert old is not None
        convert = self.convert or new_cls.upgrade_from
        new = convert(old)
        if not isinstance(new, new_cls):
            raise TypeError(f"the state conversion returned {type(new).__qualname__}, "
                            f"not {new_cls.__qualname__}")
        self.instance = self._attach(new)
        self.cls, self.upgrade_to = new_cls, None
        self.log.info("upgraded to %s version %d (%s)", new_cls.__qualname__, new_cls.version,
                      "live" if live else "upgrade test")
        new.on_upgrade(live)
