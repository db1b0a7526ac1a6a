"""Logged inputs in their argument forms, and the senders of their results.

An incoming RPC's arguments come in one of three forms: this binding's envelope (a header
with the logged time and entropy, the call id, the caller and ``[args, kwargs]`` as
msgpack), AmbrosiaJS's JSON object, or AmbrosiaJS's raw bytes (``0xFF`` + the bytes). A
result comes back as an envelope to the caller's method ``RESULT_METHOD_ID`` and resumes
the handlers awaiting it. Inputs without a header (AmbrosiaJS's) get one derived from the
log alone, so a replay sees the same ``now()`` and ``random()``.
"""

from __future__ import annotations

from typing import Any

import msgpack
import xxhash

from ambrosia_core.wire import RpcType
from ambrosia_py.errors import RemoteCallError, SerializationError, UnknownMethodError

from .. import serialization as ser
from ..methods import (
    POST_BY_IMPULSE_METHOD_ID,
    POST_METHOD_ID,
    RESULT_METHOD_ID,
    MethodKind,
    MethodSpec,
    PendingCall,
)
from . import jsconv, replaylog
from .core import INITIAL_MAGIC, EngineCore
from .stepping import Done

__all__ = ["NOT_CALLS", "ArgumentForms", "CallPlan"]

# Method ids that are not calls of a published method (results and AmbrosiaJS posts).
NOT_CALLS = frozenset({RESULT_METHOD_ID, POST_METHOD_ID, POST_BY_IMPULSE_METHOD_ID})


class CallPlan:
    """How a run of RPCs calls one published method that cannot suspend.

    ``types``: its positional parameters' types when every one is loaded as it is
    (``serialization.loads_as_is``), so arguments of exactly those types are passed
    unchanged; None otherwise.
    """

    __slots__ = ("func", "is_rpc", "name", "types")

    def __init__(self, func: Any, name: str, types: tuple[type, ...] | None,
                 is_rpc: bool) -> None:
        self.func = func
        self.name = name
        self.types = types
        self.is_rpc = is_rpc


class ArgumentForms(EngineCore):
    """The engine's arguments room (a part of ``Engine``)."""

    def _apply_initial(self, data: bytes) -> None:
        try:
            magic, ts, entropy = msgpack.unpackb(data)
            if magic != INITIAL_MAGIC:
                raise ValueError(magic)
        except Exception:
            ts, entropy = self._last_ts, xxhash.xxh64_intdigest(data) >> 1
        self._enter(ts, entropy)
        self.log.info("first start: running on_first_start%s",
                      " (replayed)" if self.is_replaying else "")
        assert self.instance is not None
        self.handlers.start(self.instance.on_first_start, (), {}, "on_first_start",
                            self.handlers.log_failure)

    def _apply_call(self, mid: int, args: bytes) -> None:
        """A call of the published method ``mid``, in any of the three argument forms."""
        spec = self.cls.__ambrosia_by_id__.get(mid)
        if spec is None:
            self._enter_derived(args)
            self.handlers.log_failure(None, UnknownMethodError(
                f"{self.cls.__qualname__} publishes no method with id {mid}"))
            return
        on_done: Done = self.handlers.log_failure
        try:
            if args and 0x90 <= args[0] <= 0x9F:  # ser.is_envelope, inline on the hot path
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

    def _call_plan(self, mid: int) -> CallPlan | None:
        """The plan of method ``mid`` for ``Engine._handle_rpcs``; None when its calls
        must go through ``_input`` (not a published method, or one that may suspend)."""
        spec = self.cls.__ambrosia_by_id__.get(mid)
        if spec is None or spec.may_suspend or mid in NOT_CALLS or self.instance is None:
            return None
        types = tuple(self._positional_types_of(spec))
        plain = type(self.serializer) is ser.Serializer and all(map(ser.loads_as_is, types))
        return CallPlan(getattr(self.instance, spec.name), spec.name,
                        types if plain else None, spec.kind is MethodKind.RPC)

    def _positional_types_of(self, spec: MethodSpec) -> list[Any]:
        types = self._positional_types.get(spec.func)
        if types is None:
            params = list(spec.signature.parameters.values())[1:]
            types = self._positional_types[spec.func] = [spec.param_type(p.name)
                                                         for p in params]
        return types

    def _decode_payload(self, spec: MethodSpec, payload: Any) -> tuple[tuple[Any, ...],
                                                                       dict[str, Any]]:
        if not (type(payload) is list and len(payload) == 2 and type(payload[0]) is list
                and type(payload[1]) is dict) and not (
                isinstance(payload, list) and len(payload) == 2
                and isinstance(payload[0], list) and isinstance(payload[1], dict)):
            raise SerializationError(f"arguments of {spec.name} are not [args, kwargs]")
        types = self._positional_types_of(spec)
        load = self.cls.__ambrosia_serializer__.load
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
            self.stray_result(env.call_id)
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
