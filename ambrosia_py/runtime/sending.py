"""What handlers and outside-world code send: awaited calls, forks (from a handler, as
part of the input being handled), Impulses (from outside-world code, queued in the
outbox), AmbrosiaJS's raw forms, side effects and checkpoint requests."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ambrosia_core.errors import LocalProtocolError
from ambrosia_core.wire import OutgoingRpc, RpcType
from ambrosia_py.errors import ImpulseDuringRecoveryError

from .. import serialization as ser
from ..methods import Hosted, MethodSpec, PendingCall
from ..stopping import StopReason
from .core import EngineCore

__all__ = ["Sending"]

_FORK = int(RpcType.FORK)


def positional_counts(spec: MethodSpec) -> tuple[int, int]:
    """How many positional arguments (and no keywords) ``spec``'s signature binds:
    ``(least, most)``; ``(1, 0)``, which nothing fits, if it has keyword-only parameters
    without defaults (then every call goes through ``signature.bind``)."""
    least = most = 0
    for p in list(spec.signature.parameters.values())[1:]:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            most += 1
            if p.default is p.empty:
                least = most
        elif p.kind is p.VAR_POSITIONAL:
            most = sys.maxsize
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            return 1, 0
    return least, most


class Sending(EngineCore):
    """The engine's sending room (a part of ``Engine``)."""

    def _payload(self, spec: MethodSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        serializer = self.cls.__ambrosia_serializer__
        if not kwargs:
            # Plain positionals: a count in range is all signature.bind would check.
            fits = self._positional_counts.get(spec.func)
            if fits is None:
                fits = self._positional_counts[spec.func] = positional_counts(spec)
            if fits[0] <= len(args) <= fits[1]:
                return [serializer.dump_all(args), {}]
        dump = serializer.dump
        try:
            spec.signature.bind(None, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{spec.name}(): {e}") from None
        return [[dump(a) for a in args], {k: dump(v) for k, v in kwargs.items()}]

    def call(self, dest: str, cls: type[Hosted], spec: MethodSpec, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> PendingCall[Any]:
        """An awaited call: sends it now, returns what the handler awaits."""
        self._require_handler(f"calling {spec.name}")
        payload = self._payload(spec, args, kwargs)
        call_id = self._next_call_id
        self._next_call_id += 1
        pc: PendingCall[Any] = PendingCall(call_id, spec.name, spec.return_type,
                                           cls.remote_errors)
        self.handlers.add(pc)
        # A fork on the wire: the call id in the envelope pairs it with its result, which
        # comes back as a fork too, so the coordinator never holds a call open.
        self._send_envelope(dest, spec.method_id, RpcType.FORK, call_id, payload)
        return pc

    def fork(self, dest: str, spec: MethodSpec, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> None:
        # ``_send_envelope`` inline (the hot path of a handler that forks in a loop): the
        # handler check once, its message built only when it fails.
        cur = self.current_input
        if cur is None or not self.outbox.on_engine_thread():
            cur = self._require_handler(f"forking {spec.name}")
        payload = self._payload(spec, args, kwargs)
        ts, entropy = cur.derive()
        self._send(dest, spec.method_id, _FORK,
                   self._encode_envelope(ts, entropy, -1, self.instance_name, payload))

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

    def watch_inputs(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (on the engine's thread) after each run of inputs applied from
        now on; only when primary, as side effects start."""
        if not self.conn.is_primary:
            raise LocalProtocolError("side effects (ctx.run_effects) may only start when "
                                     "primary")
        self.outbox.watchers.append(wake)

    def request_checkpoint(self) -> None:
        self.outbox.queue_raw(self.conn.request_checkpoint())

    async def stop_tasks(self, reason: StopReason) -> None:
        """Say why (``ctx.stop_reason``, then the instance's ``on_stop`` when primary),
        refuse further Impulses and cancel the side-effect tasks (the runner stops)."""
        self._say_why(reason)
        await self.outbox.close()

    async def drain_tasks(self, reason: StopReason, timeout: float) -> None:
        """As ``stop_tasks``, but Impulses are still taken: the tasks are cancelled and
        waited for (up to ``timeout`` seconds) while the runner still sends what they
        queue and handles what comes back, so they can record their last results."""
        self._say_why(reason)
        await self.outbox.cancel_tasks(timeout)

    def _say_why(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            if self.instance is not None and self.conn.is_primary:
                try:
                    self.instance.on_stop(reason)
                except Exception:
                    # The stop goes on: a hook's bug must not keep side effects running.
                    self.log.exception("on_stop(%s) failed", reason.name)
