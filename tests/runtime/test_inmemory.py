"""The public in-memory coordinator, used as the README shows: a class unit-tested with no
processes (first start, calls in, results out, a checkpoint, a new life from it)."""

from __future__ import annotations

import pytest

from ambrosia_core.wire import RpcType
from ambrosia_py.immortal import RESULT_METHOD_ID
from ambrosia_py.serialization import Envelope
from ambrosia_py.testing.inmemory import InMemoryCoordinator
from samples.counter.counter import Counter

from .apps import Calculator, Caller, Entry


def test_the_readme_example_first_start_calls_checkpoint_and_recovery() -> None:
    ic = InMemoryCoordinator(Counter, "counter")
    ic.first_start()  # on_first_start forks increment(1) to itself, logged and applied
    assert ic.instance.applied == [1]
    ic.send("increment", 5)
    checkpoint = ic.take_checkpoint()
    ic.send("increment", 2)
    ic.send("read", caller="reader", call_id=9)
    result = ic.outputs[-1]
    assert (result.destination, result.method_id) == ("reader", RESULT_METHOD_ID)
    assert Envelope.decode(result.args).payload == [True, 8]
    again = InMemoryCoordinator(Counter, "counter")  # a new life: checkpoint, then the log
    again.recover(checkpoint, ic.log[-2:])
    assert (again.instance.count, again.instance.applied) == (8, [1, 5, 2])
    assert again.outputs == ic.outputs[-1:]  # the replay sent the same result again


def test_impulses_from_outside_world_code_are_sent_at_the_next_pump() -> None:
    ic = InMemoryCoordinator(Counter, "counter")
    ic.first_start()
    before = len(ic.outputs)
    ic.instance.impulse_self.poke(4)
    assert len(ic.outputs) == before  # queued, as a thread's Impulse would be
    ic.deliver_self()  # pumps, then logs the Impulse back as an input
    assert [o.rpc_type for o in ic.outputs[before:]] == [RpcType.IMPULSE]
    assert ic.instance.applied == [1, 4]


def test_the_engine_hands_out_a_checkpoint_and_goes_on_only_once_it_is_sent() -> None:
    from ambrosia_core.errors import LocalProtocolError
    from ambrosia_core.wire import TakeBecomingPrimaryCheckpoint, encode_control_record
    from ambrosia_py.runtime.engine import Engine, SendBytes, SendCheckpoint

    eng = Engine(Counter, "counter")
    eng.receive_data(encode_control_record(7, TakeBecomingPrimaryCheckpoint()))
    first = eng.next_output()
    assert isinstance(first, SendBytes)  # the InitialMessage
    ckpt = eng.next_output()
    assert isinstance(ckpt, SendCheckpoint) and ckpt.size > 0 and not eng.conn.is_primary
    with pytest.raises(LocalProtocolError) as e:
        eng.next_output()
    assert str(e.value) == "the checkpoint handed out was not sent to its end"
    chunks = list(ckpt.chunks(64))
    assert len(chunks) == 1 + -(-ckpt.size // 64) and ckpt.done
    assert eng.next_output() is None and eng.conn.is_primary  # became primary: nothing to send


def test_a_journal_record_in_no_known_form_is_refused_by_name() -> None:
    from ambrosia_py.errors import SerializationError
    from ambrosia_py.runtime.journal import InitialInput, RpcInput, input_from_wire

    assert input_from_wire(["i", b"x"]) == InitialInput(b"x")
    assert input_from_wire(["r", 5, 1, b"ab", 0]) == RpcInput(5, 1, b"ab", 0)
    assert InitialInput(b"x") != RpcInput(5, 1, b"x")
    with pytest.raises(SerializationError) as e:
        input_from_wire(["q", 1])
    assert str(e.value) == ("the checkpoint's journal holds a record in no known form: "
                            "['q', 1]")


RESULTS = [3.5, "ZeroDivisionError: division by zero", [42, "HI"], "RemoteCallError"]


def test_a_call_to_another_immortal_is_answered_by_a_peer_instance() -> None:
    """An @rpc awaiting another immortal used to stay suspended: nothing answered it."""
    ic = InMemoryCoordinator(Caller, "caller")
    calc = InMemoryCoordinator(Calculator, "calc")
    ic.add_peer("calc", calc)
    ic.first_start()
    assert ic.instance.results == RESULTS
    assert calc.instance.entries == [Entry(21, "hi")]
    # Each result is a logged input of the caller: a new life replays them the same.
    again = InMemoryCoordinator(Caller, "caller")
    again.recover(ic.checkpoints[0], ic.log)
    assert again.instance.results == RESULTS


def test_a_stub_answers_by_method_name_and_says_which_answer_is_missing() -> None:
    def fail(message: str) -> None:
        raise KeyError(message)

    ic = InMemoryCoordinator(Caller, "caller")
    ic.add_peer("calc", Calculator, divide=lambda a, b: a / b,
                store=lambda e: Entry(e.n * 2, e.note.upper()), fail=fail)
    ic.first_start()
    assert ic.instance.results == RESULTS
    short = InMemoryCoordinator(Caller, "caller")
    short.add_peer("calc", Calculator, divide=lambda a, b: a / b)
    with pytest.raises(LookupError, match=r"the stub of calc has no answer for store \(give "
                       r"one: add_peer\('calc', Calculator, store=\.\.\.\)\)"):
        short.first_start()
    with pytest.raises(ValueError, match="Calculator has no method sqrt"):
        ic.add_peer("calc", Calculator, sqrt=lambda x: x)
    with pytest.raises(ValueError, match="named 'calc', not 'other'"):
        ic.add_peer("other", InMemoryCoordinator(Calculator, "calc"))
