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

A call to another immortal (an ``@rpc`` that awaits one) is answered by a peer registered
with ``add_peer``: another ``InMemoryCoordinator`` (the real class, its state kept; the two
route calls and results between them) or a stub, a class and functions that answer its
methods. ``deliver()`` moves self-calls and calls to peers, and their results, until
nothing moves; each result is a logged input of the caller, as from a real coordinator::

    def test_caller():
        ic = InMemoryCoordinator(Caller, "caller")
        ic.add_peer("calc", InMemoryCoordinator(Calculator, "calc"))
        # or a stub: ic.add_peer("calc", Calculator, divide=lambda a, b: a / b)
        ic.first_start()  # on_first_start awaits calc.divide(7, 2): answered, logged
        assert ic.instance.results[0] == 3.5

A call to a destination no peer answers stays in ``outputs`` unanswered (its handler
stays suspended), as with a coordinator whose peer never runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

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
from ..methods import RESULT_METHOD_ID
from ..runtime.engine import Engine, SendCheckpoint

__all__ = ["InMemoryCoordinator"]

_COMMIT_ID = 7  # the committer id the records carry (any value serves one instance)


@attrs.frozen
class _Stub:
    """A peer that answers calls of ``cls``'s methods with ``answers`` (functions of the
    method's arguments: their value is the result, what they raise the remote error)."""

    name: str
    cls: type[Immortal]
    answers: Mapping[str, Callable[..., Any]]

    def answer(self, rpc: OutgoingRpc) -> bytes | None:
        """The result's envelope for ``rpc`` (None for a call that awaits none).

        Raises:
            LookupError: no answer was given for the method called.
        """
        specs = {spec.method_id: spec for spec in self.cls.__ambrosia_methods__.values()}
        spec = specs.get(rpc.method_id)
        env = ser.Envelope.decode(rpc.args)
        name = spec.name if spec is not None else f"method {rpc.method_id}"
        fn = self.answers.get(name)
        if fn is None:
            raise LookupError(f"the stub of {self.name} has no answer for {name} (give one: "
                              f"add_peer({self.name!r}, {self.cls.__name__}, {name}=...))")
        load = self.cls.__ambrosia_serializer__.load
        dump = self.cls.__ambrosia_serializer__.dump
        args, kwargs = env.payload
        params = list(spec.signature.parameters.values())[1:] if spec else []
        pos = [load(v, spec.param_type(params[i].name) if spec and i < len(params)
                    else ser.inspect_empty) for i, v in enumerate(args)]
        named = {k: load(v, spec.param_type(k) if spec else ser.inspect_empty)
                 for k, v in kwargs.items()}
        try:
            payload: list[Any] = [True, dump(fn(*pos, **named))]
        except Exception as e:
            payload = [False, [type(e).__name__, str(e)]]
        if env.call_id < 0:
            return None
        return ser.Envelope(time.time_ns(), int.from_bytes(os.urandom(8)) >> 1, env.call_id,
                            self.name, payload).encode()


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
        peers: the instances that answer calls to other immortals (``add_peer``).
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
        self.peers: dict[str, InMemoryCoordinator | _Stub] = {}
        self._to_peers: list[OutgoingRpc] = []
        self._delivering = False
        self._ckpt = bytearray()

    @property
    def name(self) -> str:
        """The instance name."""
        return self.engine.instance_name

    def add_peer(self, name: str, peer: InMemoryCoordinator | type[Immortal],
                 **answers: Callable[..., Any]) -> None:
        """Answer the instance's calls to ``name``: by ``peer``, another in-memory
        coordinator (its instance handles them and its calls to this one come back), or
        by a stub of the class ``peer`` whose methods ``answers`` answer (by name: a
        function of the method's arguments, whose value is the result and whose
        exception is the caller's remote error). A peer instance not started yet is
        started here (``first_start``). ``deliver()`` moves the calls.

        Raises:
            ValueError: ``name`` is this instance's, or a peer's name differs from its
                instance's, or ``answers`` names a method ``peer`` does not have.
        """
        if name in ("", self.name):
            raise ValueError(f"{name!r} is this instance: its self-calls need no peer")
        if isinstance(peer, InMemoryCoordinator):
            if answers:
                raise ValueError("answers are for a stub; a peer instance answers itself")
            if peer.name != name:
                raise ValueError(f"the peer's instance is named {peer.name!r}, not {name!r}")
            self.peers[name] = peer
            peer.peers.setdefault(self.name, self)
            if peer.instance is None:
                peer.first_start()
            return
        unknown = sorted(set(answers) - set(peer.__ambrosia_methods__))
        if unknown:
            raise ValueError(f"{peer.__name__} has no method {', '.join(unknown)}")
        self.peers[name] = _Stub(name, peer, dict(answers))

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
        """The first start: InitialMessage, checkpoint, primary, then self-calls logged
        (and calls to peers answered: ``deliver``)."""
        self.feed(encode_control_record(_COMMIT_ID, TakeBecomingPrimaryCheckpoint()))
        self.deliver()

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

    def deliver(self) -> None:
        """Log self-calls, hand calls to the peers and log their results (and calls),
        here and at the peers, until nothing moves. A call to a destination with no
        peer stays unanswered.

        Raises:
            LookupError: a stub was called for a method it has no answer for.
        """
        if self._delivering:
            return  # a peer's deliver reached back here: the outer loop goes on
        self._delivering = True
        try:
            while True:
                self.deliver_self()
                if not self._to_peers:
                    break
                rpc = self._to_peers.pop(0)
                peer = self.peers[rpc.destination]
                if isinstance(peer, InMemoryCoordinator):
                    peer.record(rpc.incoming().encode())
                    peer.deliver()
                else:
                    result = peer.answer(rpc)
                    if result is not None:
                        self.rpc(RESULT_METHOD_ID, RpcType.FORK, result)
        finally:
            self._delivering = False

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
            elif m.destination in self.peers:
                self._to_peers.append(m)
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
