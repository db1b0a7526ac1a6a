"""The engine against an in-memory coordinator: dispatch, determinism, checkpoints with
suspended calls, AmbrosiaJS's argument forms and "post" convention."""

from __future__ import annotations

import json

import msgpack
import pytest

from ambrosia_core.errors import LocalProtocolError
from ambrosia_core.wire import RpcType
from ambrosia_py import Immortal, ImpulseDuringRecoveryError, fork, rpc
from ambrosia_py.errors import SerializationError
from ambrosia_py.immortal import POST_METHOD_ID, RESULT_METHOD_ID, default_method_id
from ambrosia_py.runtime.engine import Engine
from ambrosia_py.serialization import Envelope, encode_raw_args
from ambrosia_py.testing.inmemory import InMemoryCoordinator

from .apps import Calculator, Caller, Clocked, Entry, Pulsed


def started(cls: type[Immortal], name: str = "me", **kw: object) -> InMemoryCoordinator:
    ic = InMemoryCoordinator(Engine(cls, name, **kw))  # type: ignore[arg-type]
    ic.first_start()
    return ic


def result_for(call: object, value: object, ok: bool = True) -> bytes:
    env = Envelope.decode(call.args)  # type: ignore[attr-defined]
    return Envelope(1, 2, env.call_id, "calc", [ok, value]).encode()


def test_first_start_runs_the_hook_from_the_logged_echo_and_forks_to_itself() -> None:
    ic = started(Clocked)
    inst = ic.engine.instance
    assert isinstance(inst, Clocked)
    assert len(inst.samples) == 3  # on_first_start -> sample(3) -> sample(2) -> sample(1)
    assert [o.method_id for o in ic.outputs] == [default_method_id("sample")] * 3
    assert ic.engine.conn.is_primary


def test_replay_of_the_same_records_reproduces_state_and_outputs() -> None:
    live = started(Clocked)
    again = InMemoryCoordinator(Engine(Clocked, "me"))
    again.recover(live.checkpoints[0], list(live.log))
    assert again.engine.instance.samples == live.engine.instance.samples  # type: ignore[union-attr]
    assert again.outputs == live.outputs
    assert again.engine.conn.messages_replayed == 4


def test_a_checkpoint_taken_while_a_call_is_pending_rebuilds_the_suspended_handler() -> None:
    ic = started(Caller, "caller")
    eng = ic.engine
    assert not eng.quiescent and eng.pending_calls == 1
    call = ic.outputs[-1]
    assert call.destination == "calc" and call.method_id == default_method_id("divide")
    ckpt = ic.take_checkpoint()
    # A new life: load the checkpoint (no records after it), become primary.
    ic2 = InMemoryCoordinator(Engine(Caller, "caller", record_outputs=True))
    ic2.recover(ckpt, [])
    eng2 = ic2.engine
    assert not eng2.quiescent and eng2.pending_calls == 1
    assert ic2.outputs == []  # the re-dispatched call was not sent again
    # The result arrives after the crash: the rebuilt coroutine resumes.
    ic2.rpc(RESULT_METHOD_ID, RpcType.FORK, result_for(call, 3.5))
    div0 = ic2.outputs[-1]
    ic2.rpc(RESULT_METHOD_ID, RpcType.FORK,
            result_for(div0, ["ZeroDivisionError", "division by zero"], ok=False))
    store = ic2.outputs[-1]
    assert Envelope.decode(store.args).payload == [[{"n": 21, "note": "hi"}], {}]
    ic2.rpc(RESULT_METHOD_ID, RpcType.FORK, result_for(store, {"n": 42, "note": "HI"}))
    fail = ic2.outputs[-1]
    ic2.rpc(RESULT_METHOD_ID, RpcType.FORK, result_for(fail, ["KeyError", "'nope'"], ok=False))
    assert ic2.engine.instance.results == [  # type: ignore[union-attr]
        3.5, "ZeroDivisionError: division by zero", [42, "HI"], "RemoteCallError"]
    assert eng2.quiescent
    # Quiescent again: the next checkpoint is just the state.
    header = next(iter(msgpack.Unpacker(__import__("io").BytesIO(ic2.take_checkpoint()))))
    assert header["mode"] == "q"
    assert next(iter(msgpack.Unpacker(__import__("io").BytesIO(ckpt))))["mode"] == "p"


def test_an_awaited_call_and_a_fork_both_travel_as_forks_whatever_the_method_kind() -> None:
    # MethodKind (@rpc, @fork) is the user's view; the wire's RpcType follows how a call
    # is sent: an awaited call is a fork whose envelope carries a call id.
    caller = started(Caller, "caller")
    call = caller.outputs[-1]
    assert (call.rpc_type, Envelope.decode(call.args).call_id) == (RpcType.FORK, 1)
    clocked = started(Clocked)
    assert [(o.rpc_type, Envelope.decode(o.args).call_id) for o in clocked.outputs] == [
        (RpcType.FORK, -1)] * 3


def test_callee_returns_results_and_errors_to_the_caller_by_call_id() -> None:
    ic = started(Calculator, "calc")
    args = Envelope(5, 6, 41, "caller", [[{"n": 3, "note": "x"}], {}]).encode()
    ic.rpc(default_method_id("store"), RpcType.FORK, args)
    res = ic.outputs[-1]
    assert (res.destination, res.method_id, res.rpc_type) == ("caller", RESULT_METHOD_ID,
                                                           RpcType.FORK)
    env = Envelope.decode(res.args)
    assert env.call_id == 41 and env.payload == [True, {"n": 6, "note": "X"}]
    assert ic.engine.instance.entries == [Entry(3, "x")]  # type: ignore[union-attr]
    ic.rpc(default_method_id("divide"), RpcType.FORK,
           Envelope(5, 6, 42, "caller", [[1, 0], {}]).encode())
    env = Envelope.decode(ic.outputs[-1].args)
    assert env.call_id == 42 and env.payload == [False, ["ZeroDivisionError", "division by zero"]]


def test_bad_arguments_are_reported_not_raised() -> None:
    ic = started(Calculator, "calc")
    ic.rpc(default_method_id("store"), RpcType.FORK,
           Envelope(5, 6, 9, "caller", [[{"n": "not a number"}], {}]).encode())
    env = Envelope.decode(ic.outputs[-1].args)
    assert env.payload[0] is False and env.payload[1][0] == "SerializationError"
    ic.rpc(12345, RpcType.FORK, b"\x90")  # unknown method: logged, the instance goes on
    assert ic.engine.conn.is_primary


class JsPeer(Immortal):
    def __init__(self) -> None:
        self.got: list[object] = []

    @fork(method_id=8)
    def hello(self, greeting: str) -> None:
        self.got.append(greeting)

    @fork(method_id=9)
    def blob(self, data: bytes) -> None:
        self.got.append(data)

    @rpc
    async def add(self, a: int, b: int) -> int:
        return a + b


def test_ambrosiajs_json_and_raw_arguments_and_post_calls() -> None:
    ic = started(JsPeer, "py")
    ic.rpc(8, RpcType.FORK, b'{"greeting":"from JS"}')
    ic.rpc(9, RpcType.IMPULSE, encode_raw_args(b"\x00\x01"))
    post = {"senderInstanceName": "js", "destinationInstanceName": "py", "methodName": "add",
            "methodVersion": 1, "callID": 77, "arg:a": 2, "arg:b": 40}
    ic.rpc(POST_METHOD_ID, RpcType.FORK, json.dumps(post).encode())
    assert ic.engine.instance.got == ["from JS", b"\x00\x01"]  # type: ignore[union-attr]
    out = ic.outputs[-1]
    assert (out.destination, out.method_id, out.rpc_type) == ("js", POST_METHOD_ID, 1)
    body = json.loads(out.args)
    assert body["methodName"] == "add_Result" and body["callID"] == 77 and body["result"] == 42


def test_impulse_rules() -> None:
    ic = InMemoryCoordinator(Engine(Pulsed, "p"))
    from ambrosia_core.wire import TakeBecomingPrimaryCheckpoint, encode_control_record

    ic.feed(encode_control_record(7, TakeBecomingPrimaryCheckpoint()))
    eng = ic.engine
    assert eng.conn.is_primary
    inst = eng.instance
    assert isinstance(inst, Pulsed)
    before = len(ic.outputs)
    inst.impulse_self.pulse(5)  # outside-world code, primary: queued, sent at the next pump
    assert len(ic.outputs) == before
    ic.pump()
    assert [(o.method_id, o.rpc_type) for o in ic.outputs[before:]] == [
        (default_method_id("pulse"), RpcType.IMPULSE)]
    ic2 = InMemoryCoordinator(Engine(Pulsed, "p"))
    ic2.feed(encode_checkpoint_for(ic.checkpoint))
    with pytest.raises(ImpulseDuringRecoveryError):
        ic2.engine.instance.impulse_self.pulse(1)  # type: ignore[union-attr]
    with pytest.raises(LocalProtocolError):
        inst.self_proxy.pulse(1)  # a fork from outside a handler


def encode_checkpoint_for(ckpt: bytes) -> bytes:
    from ambrosia_core.wire import encode_checkpoint_record

    return encode_checkpoint_record(7, len(ckpt)) + ckpt


def test_a_checkpoint_of_another_version_is_refused_clearly() -> None:
    class V1(Immortal):
        version = 1

    class V2(Immortal):
        version = 2

    ic = InMemoryCoordinator(Engine(V1, "v"))
    from ambrosia_core.wire import TakeBecomingPrimaryCheckpoint, encode_control_record

    ic.feed(encode_control_record(7, TakeBecomingPrimaryCheckpoint()))
    ic2 = InMemoryCoordinator(Engine(V2, "v"))
    with pytest.raises(SerializationError, match=r"version 1.*version 2"):
        ic2.feed(encode_checkpoint_for(ic.checkpoint))


class Big(Immortal):
    def __init__(self) -> None:
        self.table: dict[str, int] = {}
        self.items: list[Entry] = []

    @fork
    def fill(self, n: int) -> None:
        self.table = {f"k{i}": i for i in range(n)}
        self.items = [Entry(i) for i in range(n)]


def test_large_states_stream_item_by_item_and_load_back() -> None:
    ic = started(Big, "big")
    ic.rpc(default_method_id("fill"), RpcType.FORK,
           Envelope(1, 1, -1, "big", [[5000], {}]).encode())
    ckpt = ic.take_checkpoint()
    objects = list(msgpack.Unpacker(__import__("io").BytesIO(ckpt), raw=False))
    assert len(objects) > 10000  # not one object holding the whole state
    ic2 = InMemoryCoordinator(Engine(Big, "big"))
    ic2.recover(ckpt, [])
    inst = ic2.engine.instance
    assert isinstance(inst, Big)
    assert inst.table["k4999"] == 4999 and inst.items[1234] == Entry(1234)


class Chunked(Immortal):
    def __init__(self) -> None:
        self.data = b""
        self.seen: list[int] = []

    @fork
    def put(self, data: bytes) -> None:
        self.data = data

    def checkpoint_producer(self):  # type: ignore[no-untyped-def]
        yield self.data  # one chunk bigger than the 1 MiB limit
        yield bytearray(b"tail")

    def checkpoint_consumer(self, chunks):  # type: ignore[no-untyped-def]
        parts = list(chunks)
        self.seen = [len(c) for c in parts]
        self.data = b"".join(parts)[:-4]


def test_checkpoint_producer_chunks_reach_the_consumer_split_at_1_mib() -> None:
    ic = started(Chunked)
    data = bytes(range(256)) * (10 << 10)  # 2.5 MiB
    ic.rpc(default_method_id("put"), RpcType.FORK, Envelope(1, 2, -1, "me",
                                                             [[data], {}]).encode())
    ckpt = ic.take_checkpoint()
    ic2 = InMemoryCoordinator(Engine(Chunked, "me"))
    ic2.recover(ckpt, [])
    inst = ic2.engine.instance
    assert isinstance(inst, Chunked)
    assert inst.data == data and inst.seen == [1 << 20, 1 << 20, 512 << 10, 4]


def test_a_producer_that_yields_no_bytes_is_a_serialization_error() -> None:
    class Wrong(Immortal):
        def checkpoint_producer(self):  # type: ignore[no-untyped-def]
            yield "text"

        def checkpoint_consumer(self, chunks):  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(SerializationError, match="yielded str, not bytes"):
        started(Wrong)


class Blob(Immortal):
    def __init__(self) -> None:
        self.data = b""
        self.note = "blob"

    @fork
    def put(self, data: bytes) -> None:
        self.data = data


def test_a_state_object_larger_than_msgpacks_default_buffer_loads_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """msgpack's Unpacker refuses an object larger than its max_buffer_size (100 MiB by
    default), so a state holding one such object was checkpointed but could never be
    loaded. Shrinking the library's default to 1 MiB shows the same refusal with a
    3 MiB object: the reader must size its buffer from the checkpoint instead."""
    real = msgpack.Unpacker

    def small_default(*args: object, **kw: object) -> msgpack.Unpacker:
        kw.setdefault("max_buffer_size", 1 << 20)
        return real(*args, **kw)

    monkeypatch.setattr(msgpack, "Unpacker", small_default)
    ic = started(Blob)
    data = bytes(range(256)) * (12 << 10)  # 3 MiB
    ic.rpc(default_method_id("put"), RpcType.FORK, Envelope(1, 2, -1, "me",
                                                             [[data], {}]).encode())
    ckpt = ic.take_checkpoint()
    # The bytes field is one msgpack bin object, as any msgpack reader expects.
    objects = list(real(__import__("io").BytesIO(ckpt), raw=False, max_buffer_size=8 << 20))
    assert data in objects
    ic2 = InMemoryCoordinator(Engine(Blob, "me"))
    ic2.recover(ckpt, [])
    inst = ic2.engine.instance
    assert isinstance(inst, Blob)
    assert inst.data == data and inst.note == "blob"
