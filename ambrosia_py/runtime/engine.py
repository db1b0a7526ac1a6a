"""The deterministic core, as a sans-IO session: bytes from the coordinator in
(``receive_data``), outputs out (``next_output``: bytes to write, or a checkpoint to
stream). It answers a ``CheckpointRequested`` itself and decides when queued Impulses may go; its
driver (``runner`` over sockets, ``ambrosia_py.testing.inmemory`` in tests) only moves
bytes. Handlers run on the driver's thread.

The engine is one class put together from rooms, each one job:

- ``engine`` (here): the I/O surface and the dispatch of protocol events and inputs;
- ``core``: the shared state, the input being handled, the one way RPCs are sent;
- ``journal``: the typed inputs a checkpoint carries while handlers are suspended;
- ``stepping``: handlers' coroutines stepped by hand, and the pending-call table;
- ``arguments``: the three argument forms, results, and the senders of results;
- ``posts`` (with ``jsconv``): AmbrosiaJS's "post" convention;
- ``sending``: calls, forks and Impulses handlers and outside-world code send;
- ``outbox``: the thread-safe Impulse queue and side-effect tasks;
- ``lifecycle`` (with ``checkpoint``): checkpoints written and loaded, and upgrades.

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

The arrow to the API: ``immortal`` and ``context`` describe what they need from a
runtime as ``context.Runtime`` and never import this package; the engine provides that
protocol. This package never imports them either: it runs any class that provides
``methods.Hosted`` (what ``Immortal`` records on each subclass), and uses the method
definitions below both (method specs, ``PendingCall``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

import msgpack

from ambrosia_core.errors import LocalProtocolError
from ambrosia_core.wire import NEED_DATA, Rpc

from ..methods import POST_BY_IMPULSE_METHOD_ID, POST_METHOD_ID, RESULT_METHOD_ID
from ..protocol import events as ev
from . import checkpoint as ckpt
from .arguments import ArgumentForms, CallPlan
from .core import INITIAL_MAGIC
from .handling import CurrentInput
from .journal import InitialInput, LoggedInput, RpcInput
from .lifecycle import Lifecycle
from .outbox import IMPULSE_QUEUE_LIMIT
from .outputs import Output, SendBytes, SendCheckpoint
from .posts import JsPosts
from .sending import Sending

__all__ = ["CHECKPOINT_FORMAT", "IMPULSE_QUEUE_LIMIT", "CurrentInput", "Engine", "Output",
           "SendBytes", "SendCheckpoint"]

CHECKPOINT_FORMAT = ckpt.CHECKPOINT_FORMAT

_unpackb = msgpack.unpackb
_UNPLANNED: Any = object()

# RPC bytes gathered into one output before it is handed out (a long replay's results).
_BATCH_BYTES = 1 << 20


class Engine(Lifecycle, Sending, JsPosts, ArgumentForms):
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
        config: the instance's configuration (``ctx.config``; see ``runtime.config``).
    """

    def attach(self, loop: asyncio.AbstractEventLoop | None, wakeup: Callable[[], None],
               flush: Callable[[bytes], None] | None = None,
               failed: Callable[[BaseException], None] | None = None) -> None:
        """Drive the engine from the calling thread (handlers run on it).

        Args:
            loop: the event loop side effects (``ctx.spawn``) run on, if any.
            wakeup: called on this thread when outside-world code queued something to
                send: call ``next_output`` then.
            flush: if given, called during a long handler of a primary with bytes to
                write now, every ``FLUSH_EVERY`` RPCs the handler sends (so the
                coordinator starts on them before it ends); they go before anything
                ``next_output`` returns afterwards.
            failed: called with the error of a side-effect task that ended with one.
        """
        self.outbox.attach(loop, wakeup, failed)
        self._flush = flush

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes read from the coordinator's send port (copied if need be: the caller may
        reuse its buffer); act on them with ``next_output``."""
        self.conn.receive_data(data)

    def next_output(self) -> Output | None:
        """Handle the events received so far and return the next thing to send: bytes, or a
        checkpoint to stream (all of it, before calling again). None: nothing until more
        data is received or ``wakeup`` is called; nor is there when this sets ``settled``
        (a driver may skip the call that would return that None)."""
        self.settled = False
        if self._ckpt_out is not None and not self._ckpt_out.done:
            raise LocalProtocolError("the checkpoint handed out was not sent to its end")
        if self._held is not None:
            self._ckpt_out, self._held = self._held, None
            return self._ckpt_out
        pending = self._out_pending = bytearray()  # an early flush empties it
        conn = self.conn
        while True:
            rpcs = conn.next_rpcs()
            if rpcs:
                # A run of RPCs (a replay's records, a burst of calls): one call per chunk.
                self._handle_rpcs(rpcs)
                if len(pending) >= _BATCH_BYTES:
                    return SendBytes(bytes(pending))
                continue
            event = conn.next_event()
            if event is NEED_DATA:
                break
            if type(event) is ev.CheckpointRequested:
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
        if conn.is_primary:
            outbox = self.outbox
            if outbox.watchers and outbox.watched_inputs != self._inputs_seen:
                outbox.watched_inputs = self._inputs_seen
                for wake in outbox.watchers:
                    wake()  # the state changed: side effects look at it again
            if not conn.owes_checkpoint:
                pending += self._take_outbox()
        self.settled = True
        return SendBytes(bytes(pending)) if pending else None

    def _take_outbox(self) -> bytes:
        """Impulses and checkpoint requests queued by outside-world code, encoded."""
        impulses, raw = self.outbox.take()
        out = self.conn.send_rpcs(impulses) if impulses else b""
        return out + b"".join(raw)

    def _take_checkpoint(self, reason: ev.CheckpointReason) -> SendCheckpoint:
        f, size = self.write_checkpoint()
        return SendCheckpoint(self.conn, f, size, reason, self.log)

    def _handle(self, event: ev.ProtocolEvent) -> bytes:
        """Handle one protocol event other than ``CheckpointRequested``; the bytes to send."""
        kind = type(event)
        if kind is ev.IncomingRpc:
            rpc = event.rpc  # type: ignore[union-attr]
            self._input(RpcInput(rpc.method_id, rpc.rpc_type, rpc.args, rpc.reserved))
            return self._encode_batch()
        if kind is ev.InitialMessageReceived:
            self._input(InitialInput(event.data))  # type: ignore[union-attr]
            return self._encode_batch()
        if kind is ev.FirstStart:
            self.log.info("first start: sending the InitialMessage")
            self.instance = self._attach(self.cls())
            header = [INITIAL_MAGIC, time.time_ns(), int.from_bytes(os.urandom(8)) >> 1]
            return self.conn.send_initial_message(msgpack.packb(header))
        if kind is ev.CheckpointLoadStarted:
            self._begin_load(event.size)  # type: ignore[union-attr]
            return b""
        if kind is ev.CheckpointLoadChunk:
            assert self._ckpt_in is not None
            self._ckpt_in.write(event.data)  # type: ignore[union-attr]
            return b""
        if kind is ev.CheckpointLoaded:
            self._finish_load()
            out = self._encode_batch()
            assert self.instance is not None
            self.instance.on_checkpoint_loaded()
            return out
        if kind is ev.UpgradeRequested:
            self._upgrade(event.live)  # type: ignore[union-attr]
            return b""
        if kind is ev.RecoveryComplete:
            n = event.messages_replayed  # type: ignore[union-attr]
            self.log.info("recovery complete: %d messages replayed", n)
            assert self.instance is not None
            self.instance.on_recovery_complete(n)
            return b""
        if kind is ev.BecamePrimary:
            self.inputs_before_primary = self._inputs_seen  # what follows is live
            self.log.info("became primary%s", " after recovery" if event.recovered else "")  # type: ignore[union-attr]
            assert self.instance is not None
            self.instance.on_become_primary()
            return b""
        raise LocalProtocolError(f"unexpected protocol event {event!r}")

    def _handle_rpcs(self, rpcs: list[Rpc]) -> None:
        """Handle incoming RPCs in log order, as one ``IncomingRpc`` event each would be;
        the bytes to send go to ``_out_pending``.

        A call of a published method that cannot suspend, while no handler is suspended,
        needs no journal. The usual one (a fork in this binding's envelope whose
        arguments are all of their parameters' exact immutable types, ``_call_plan``)
        is run right here, which is most of a long replay; any other such call goes
        straight to ``_apply_call``; anything else takes ``_input``.
        """
        out = self._out_pending
        handlers = self.handlers
        plans: dict[int, CallPlan | None] = {}  # by method id, for this run of RPCs
        unpack = _unpackb
        for method_id, rpc_type, args, reserved in rpcs:
            plan = plans.get(method_id, _UNPLANNED)
            if plan is _UNPLANNED:
                plan = plans[method_id] = self._call_plan(method_id)
            if plan is not None and handlers.suspended == 0 and not reserved:
                items = None
                if args and 0x90 <= args[0] <= 0x9F:  # an envelope
                    try:
                        items = unpack(args, raw=False, strict_map_key=False)
                    except Exception:  # not msgpack: _apply_call reports it
                        items = None
                if type(items) is list and len(items) == 5:
                    ts, entropy, call_id, caller, payload = items
                    if (type(ts) is int and type(entropy) is int and type(call_id) is int
                            and type(caller) is str and (call_id < 0 or not plan.is_rpc)
                            and type(payload) is list and len(payload) == 2
                            and type(payload[0]) is list and type(payload[1]) is dict
                            and not payload[1]
                            and tuple(map(type, payload[0])) == plan.types):
                        self._inputs_seen += 1
                        if ts > self._last_ts:
                            self._last_ts = ts
                        self.current_input = CurrentInput(ts, entropy)
                        try:
                            # Handlers.start, inlined: a fork's None needs nothing more.
                            result = plan.func(*payload[0])
                        except Exception as e:
                            handlers.log_failure(None, e)
                        else:
                            if result is not None:
                                handlers.returned(result, plan.name, handlers.log_failure)
                        finally:
                            self.current_input = None
                        if handlers.suspended:
                            self._check_journal()
                        if self._batch:
                            out += self._encode_batch()
                        continue
                self._inputs_seen += 1
                try:
                    self._apply_call(method_id, args)
                finally:
                    self.current_input = None
                if handlers.suspended:
                    self._check_journal()
            else:
                self._input(RpcInput(method_id, rpc_type, args, reserved))
            if self._batch:
                out += self._encode_batch()

    def _input(self, record: LoggedInput) -> None:
        """Handle one logged input, journaled while a handler may be suspended."""
        if self.handlers.suspended == 0 and self._may_suspend(record):
            self._journal.begin(self._state_bytes())
        if self._journal.active:
            self._journal.add(record)
        self._apply(record)
        if self.handlers.suspended == 0:
            self._journal.clear()

    def _may_suspend(self, record: LoggedInput) -> bool:
        if type(record) is InitialInput:
            assert self.instance is not None
            hook = type(self.instance).on_first_start
            return inspect.iscoroutinefunction(hook)
        method_id = record.method_id  # type: ignore[union-attr]
        if method_id == RESULT_METHOD_ID:
            return False
        if method_id in (POST_METHOD_ID, POST_BY_IMPULSE_METHOD_ID):
            return True  # a JSON post may name any method; be safe
        spec = self.cls.__ambrosia_by_id__.get(method_id)
        return spec is not None and spec.may_suspend

    def _apply(self, record: LoggedInput) -> None:
        """Dispatch one input to its room: the first start, a result, an AmbrosiaJS post,
        or a call of a published method."""
        self._inputs_seen += 1
        try:
            if type(record) is InitialInput:
                self._apply_initial(record.data)
            elif record.reserved:  # type: ignore[union-attr]
                self.log.error("ignoring an RPC in the C# binding's result form (reserved "
                               "byte %d)", record.reserved)  # type: ignore[union-attr]
            elif record.method_id == RESULT_METHOD_ID:  # type: ignore[union-attr]
                self._apply_result(record.args)  # type: ignore[union-attr]
            elif record.method_id in (POST_METHOD_ID,  # type: ignore[union-attr]
                                      POST_BY_IMPULSE_METHOD_ID):
                self._apply_post(record.args)  # type: ignore[union-attr]
            else:
                self._apply_call(record.method_id, record.args)  # type: ignore[union-attr]
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
