"""The engine's state, shared by its rooms: the class and instance, the connection, the
input being handled, the counters a checkpoint carries, and the one way RPCs are sent
(``_send``, which a replay of a checkpoint's journal suppresses).

The rooms (``arguments``, ``posts``, ``sending``, ``lifecycle``) each add one job to this
state; ``engine.Engine`` puts them together and owns the dispatch and the I/O surface.

The runtime sits below the API: it knows the class it runs as ``methods.Hosted`` (what
``Immortal`` records on each subclass) and never imports ``immortal`` or ``context``.
Each instance it creates is handed the engine (which provides ``context.Runtime``)
through the class's own ``__ambrosia_attach__``, which builds its context.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import IO, Any

import xxhash

from ambrosia_core.errors import LocalProtocolError
from ambrosia_core.loops import said_at
from ambrosia_core.metrics import DURATION_BUCKETS, SIZE_BUCKETS, Histogram, MetricsServer
from ambrosia_core.wire import OutgoingRpc
from ambrosia_core.wire.encoders import outgoing_rpc_head, sized

from .. import serialization as ser
from ..methods import Hosted, MethodSpec, is_hosted_class
from ..protocol import BindingConnection
from ..stopping import StopReason
from . import replaylog
from .config import EMPTY_CONFIG, freeze
from .handling import CurrentInput
from .journal import Journal, LoggedInput
from .outbox import Outbox
from .outputs import SendCheckpoint
from .stepping import Handlers

__all__ = ["FLUSH_EVERY", "INITIAL_MAGIC", "EngineCore"]

INITIAL_MAGIC = "ambrosia-py"  # the InitialMessage header of this binding
FLUSH_EVERY = 256  # RPCs a handler sends before they are written early (Engine.attach)


class EngineCore:
    """The state every room of the engine shares, and the one send path; the constructor's
    arguments are described on ``Engine``, the class users build."""

    def __init__(
        self,
        cls: type[Hosted],
        instance_name: str,
        *,
        upgrade_to: type[Hosted] | None = None,
        convert: Callable[[Any], Hosted] | None = None,
        record_outputs: bool = False,
        logger: logging.Logger | None = None,
        log_replay: bool | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        for c in (cls, upgrade_to):
            if c is not None and not is_hosted_class(c):
                raise TypeError(f"{c!r} is not an Immortal subclass")
        self.cls = cls
        self.instance_name = instance_name
        # Read-only, nested tables too (``config.freeze``); outside-world input.
        self._config: Mapping[str, Any] = EMPTY_CONFIG if config is None else freeze(config)
        self.config_read = False  # whether the instance read it (see ``config``)
        self.stray_results = 0  # results of calls that were not pending, ignored
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
        self.instance: Hosted | None = None
        self.outputs: list[OutgoingRpc] | None = [] if record_outputs else None
        self.current_input: CurrentInput | None = None
        self.outbox = Outbox(self.outputs)
        self.stop_reason: StopReason | None = None  # set once, as the runner stops
        self.checkpoints_taken = 0
        self.last_checkpoint_size = 0
        # Read by the metrics (``runtime.metrics``), never by the engine itself: the
        # process's exposition server when it serves one (an immortal's I/O adds its own
        # sources to it), the inputs handled before this life became primary, and how
        # long checkpoints took to write and to load.
        self.metrics: MetricsServer | None = None
        self.inputs_before_primary = 0
        self._load_began = (0.0, 0)  # when the checkpoint being loaded began, its size
        self.checkpoints_loaded = 0
        self.checkpoint_write_seconds = Histogram(DURATION_BUCKETS)
        self.checkpoint_write_bytes = Histogram(SIZE_BUCKETS)
        self.checkpoint_load_seconds = Histogram(DURATION_BUCKETS)
        self.checkpoint_load_bytes = Histogram(SIZE_BUCKETS)
        # Checkpointed framework state.
        self._next_call_id = 1
        self._last_ts = 0
        self._inputs_seen = 0
        # Volatile: rebuilt from checkpoints and replay.
        self.handlers = Handlers(self.user_log)
        self._journal = Journal()  # what checkpoints carry while handlers are suspended
        self._suppress = False
        # RPCs sent while handling the input, encoded as they are sent, and the others'
        # destinations they name (an ordered set).
        self._batch: list[bytes] = []
        self._batch_dests: dict[str, None] = {}
        self._heads: dict[tuple[str, int, int], bytes] = {}  # (dest, method, type) -> head
        # Envelopes of the RPCs handlers send (on this thread only; Impulses from other
        # threads use ser.encode_envelope): one msgpack packer kept, not one per call.
        self._encode_envelope = ser.envelope_encoder()
        # Encoded bytes of the inputs handled in this next_output, not yet handed out, and
        # the driver's early write (Engine.attach).
        self._out_pending = bytearray()
        self._flush: Callable[[bytes], None] | None = None
        self._ckpt_in: IO[bytes] | None = None
        self._ckpt_out: SendCheckpoint | None = None  # handed out, maybe not yet all sent
        self._held: SendCheckpoint | None = None  # taken, to hand out after earlier bytes
        # The last next_output handled everything received and queued: the next call
        # would return None (the runner skips it, one call per input it reads).
        self.settled = False
        self._loaded_upgraded = False  # the checkpoint loaded was already upgrade_to's
        # Each method's positional parameter types, looked up once rather than per call.
        self._positional_types: dict[Callable[..., Any], list[Any]] = {}
        # ... and how many positional arguments each binds, (least, most).
        self._positional_counts: dict[Callable[..., Any], tuple[int, int]] = {}

    @property
    def config(self) -> Mapping[str, Any]:
        """The configuration (``ctx.config``); reading it is noted in ``config_read``, so
        that a repro whose outputs diverge can name a configuration unlike the recorded
        run's as the likely cause."""
        self.config_read = True
        return self._config

    def stray_result(self, call_id: object, what: str = "result") -> None:
        """A result came for a call that is not pending: ignored, said the 1st, 10th,
        100th ... time (a replay that diverged meets one for every recorded result)."""
        self.stray_results += 1
        n = self.stray_results
        if said_at(n):
            self.log.warning("a %s for call %r, which is not pending, was ignored%s", what,
                             call_id, "" if n == 1 else f" ({n} such results so far)")

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

    def _attach(self, inst: Hosted) -> Hosted:
        # The rooms together (``Engine``) provide the API's ``context.Runtime``; the class
        # builds the context from it, so the runtime need not know the context's type.
        inst.__ambrosia_attach__(self, self.instance_name, self.user_log)
        return inst

    def _enter(self, ts: int, entropy: int) -> CurrentInput:
        if ts > self._last_ts:
            self._last_ts = ts
        cur = self.current_input = CurrentInput(ts, entropy)
        return cur

    def _enter_derived(self, args: bytes) -> CurrentInput:
        """Header of an input that carries none (AmbrosiaJS's): a function of the log."""
        return self._enter(self._last_ts, xxhash.xxh64_intdigest(args, seed=self._inputs_seen)
                           >> 1)

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
        # Encoded now, the head once per destination and method: the frame is what
        # BindingConnection.send_rpcs would make of the OutgoingRpc.
        key = (dest, method_id, rpc_type)
        head = self._heads.get(key)
        if head is None:
            head = outgoing_rpc_head("" if dest == self.instance_name else dest, method_id,
                                     int(rpc_type))
            if len(self._heads) < 4096:  # destinations and methods are few; stay bounded
                self._heads[key] = head
        batch = self._batch
        frame = head + args
        n = len(frame)
        # The usual two-byte size inline, saving a call to ``sized`` per send (bench/README.md).
        # Must agree with encoders.sized (tests/runtime/test_send_path.py checks).
        batch.append(bytes((((n << 1) & 0x7F) | 0x80, n >> 6)) + frame if 64 <= n < 8192
                     else sized(frame))
        if dest and dest != self.instance_name:
            self._batch_dests[dest] = None
        if self.outputs is not None:
            self.outputs.append(OutgoingRpc(dest, method_id, int(rpc_type), args))
        if len(batch) >= FLUSH_EVERY and self._flush is not None and self.conn.is_primary:
            # A long handler: what it sent so far goes now, after what came before it.
            out = self._out_pending
            data = bytes(out) + self._encode_batch()
            del out[:]
            self._flush(data)

    def _encode_batch(self) -> bytes:
        if not self._batch:
            return b""
        batch, self._batch = self._batch, []
        dests, self._batch_dests = self._batch_dests, {}
        return self.conn.send_frames(batch, dests)

    def _apply(self, record: LoggedInput) -> None:
        """Handle one logged input (the facade's dispatch; rooms re-dispatch journals)."""
        raise NotImplementedError

    def _send_envelope(self, dest: str, method_id: int, rpc_type: int, call_id: int,
                       payload: Any) -> None:
        cur = self._require_handler("sending an RPC")
        ts, entropy = cur.derive()
        self._send(dest, method_id, rpc_type,
                   self._encode_envelope(ts, entropy, call_id, self.instance_name, payload))

    def _load_json_kwargs(self, spec: MethodSpec, kw: dict[str, Any]) -> dict[str, Any]:
        """JSON arguments (AmbrosiaJS's) as the parameters' annotated types."""
        s = self.serializer
        return {k: s.load(v, spec.param_type(k)) for k, v in kw.items()}
