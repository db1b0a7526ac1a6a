"""While a handler is suspended on an await, every checkpoint carries the inputs since it
began (its journal): a warning when that passes the class's journal_warning_bytes (once,
then at each doubling), and journal_limit_bytes failing the suspended awaits."""

from __future__ import annotations

import io
import logging
import re

import msgpack
import pytest

from ambrosia_core.ports import free_ports
from ambrosia_core.wire import RpcType
from ambrosia_py.immortal import RESULT_METHOD_ID, default_method_id
from ambrosia_py.runtime.engine import Engine
from ambrosia_py.runtime.journal import InitialInput, RpcInput, input_from_wire, input_size
from ambrosia_py.serialization import Envelope
from ambrosia_py.testing import checkpoints, repro
from ambrosia_py.testing.inmemory import InMemoryCoordinator
from tests.launcher import Launcher, wait_until

from .apps import BoundedPatient, ImpulsedBoundedPatient, ImpulsedPatient, Patient, Waiters

PAD = default_method_id("pad")
WARNING = ("every checkpoint now carries {n} inputs ({size} bytes) because handlers are "
           "suspended: on_first_start awaiting divide (call 1) (over journal_warning_bytes="
           "1000; see 'Long-lived work' in the README)")


def _pad_args(i: int) -> bytes:
    return Envelope(i, i, -1, "feeder", [[bytes(150)], {}]).encode()


def _pad(ic: InMemoryCoordinator, i: int) -> None:
    ic.rpc(PAD, RpcType.FORK, _pad_args(i))


def _checkpoint(ic: InMemoryCoordinator) -> tuple[str, list[list[object]]]:
    """The mode of a checkpoint taken now, and the journal it carries."""
    objects = list(msgpack.Unpacker(io.BytesIO(ic.take_checkpoint()), raw=False))
    mode = objects[0]["mode"]
    return mode, (objects[-1] if mode == "p" else [])


def _checkpoint_bytes(ic: InMemoryCoordinator) -> bytes:
    data = ic.take_checkpoint()
    assert next(iter(msgpack.Unpacker(io.BytesIO(data), raw=False)))["mode"] == "p"
    return data


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_growing_journal_is_reported_once_per_threshold_crossing(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    ic = InMemoryCoordinator(Engine(Patient, "patient"))
    ic.first_start()
    assert not ic.engine.quiescent
    seen: list[tuple[int, int]] = []  # (inputs, bytes) the checkpoints carried
    expected: list[str] = []
    for i in range(30):
        before = len(_warnings(caplog))
        _pad(ic, i)
        mode, journal = _checkpoint(ic)
        assert mode == "p"
        n, size = len(journal), sum(input_size(input_from_wire(r)) for r in journal)
        crossed = [t for t in (1000, 2000, 4000) if (seen[-1][1] if seen else 0) < t <= size]
        if crossed:
            expected.append(WARNING.format(n=n, size=size))
        assert len(_warnings(caplog)) == before + len(crossed)
        seen.append((n, size))
    assert seen[-1][1] > 4000  # three crossings in all: 1000, 2000, 4000
    assert _warnings(caplog) == expected and len(expected) == 3


def test_past_journal_limit_bytes_the_await_fails_and_checkpoints_shrink(
        caplog: pytest.LogCaptureFixture) -> None:
    ic = InMemoryCoordinator(Engine(BoundedPatient, "patient"))
    ic.first_start()
    first = ic.checkpoints[0]
    call = ic.outputs[-1]
    mid, mid_at = b"", 0
    for i in range(30):
        _pad(ic, i)
        if i == 9:  # a checkpoint carrying a journal, to recover from below
            mid, mid_at = _checkpoint_bytes(ic), len(ic.log)
        if ic.engine.quiescent:
            break
    inst = ic.engine.instance
    assert isinstance(inst, BoundedPatient)
    # The journal: the InitialMessage's echo, then one pad after another until past 3000.
    sizes = [input_size(InitialInput(ic.log[0][2:]))]
    while sum(sizes) <= 3000:
        sizes.append(input_size(RpcInput(PAD, RpcType.FORK, _pad_args(len(sizes) - 1))))
    assert inst.padded == len(sizes) - 1 == 17
    assert inst.outcome == (
        f"JournalLimitError: divide (call 1) was abandoned: the {len(sizes)} inputs "
        f"({sum(sizes)} bytes) carried since handlers were suspended passed "
        "journal_limit_bytes=3000")
    mode, _ = _checkpoint(ic)
    assert mode == "q" and len(ic.checkpoint) < 300  # the state alone, no journal
    # The answer that comes after all is ignored.
    ic.rpc(RESULT_METHOD_ID, RpcType.FORK,
           Envelope(1, 2, Envelope.decode(call.args).call_id, "calc", [True, 0.5]).encode())
    assert inst.outcome.startswith("JournalLimitError: ")
    # A replay of the same log gives up at the same input, quietly.
    caplog.clear()
    again = InMemoryCoordinator(Engine(BoundedPatient, "patient"))
    again.recover(first, list(ic.log))
    replayed = again.engine.instance
    assert isinstance(replayed, BoundedPatient)
    assert (replayed.padded, replayed.outcome) == (inst.padded, inst.outcome)
    assert _warnings(caplog) == ["a result for call 1, which is not pending, was ignored"]
    # So does a recovery from the checkpoint that carried a journal: its inputs count.
    later = InMemoryCoordinator(Engine(BoundedPatient, "patient"))
    later.recover(mid, list(ic.log[mid_at:]))
    recovered = later.engine.instance
    assert isinstance(recovered, BoundedPatient)
    assert (recovered.padded, recovered.outcome) == (inst.padded, inst.outcome)


def test_the_limit_fails_every_suspended_await_oldest_first(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    ic = InMemoryCoordinator(Engine(Waiters, "waiters"))
    ic.first_start()
    ic.deliver_self()  # the two self-calls: both handlers now await calc
    assert ic.engine.pending_calls == 2 and not ic.engine.quiescent
    for i in range(30):
        _pad(ic, i)
        if ic.engine.quiescent:
            break
    inst = ic.engine.instance
    assert isinstance(inst, Waiters)
    assert [o.split(" was abandoned")[0] for o in inst.outcomes] == [
        "1: divide (call 1)", "2: divide (call 2)"]
    assert inst.outcomes[0].split(" was abandoned")[1] == inst.outcomes[1].split(
        " was abandoned")[1]
    assert ic.engine.pending_calls == 0
    assert _warnings(caplog) == []  # journal_warning_bytes = None: no warning


# ------------------------------------------------------------ `ambrosia run`, kill -9
WARNED = re.compile(r".* ambrosia\.patient: every checkpoint now carries (\d+) inputs "
                    r"\((\d+) bytes\) because handlers are suspended: on_first_start awaiting "
                    r"divide \(call 1\) \(over journal_warning_bytes=1000; see 'Long-lived "
                    r"work' in the README\)$")


def _register_calc(launcher: Launcher) -> None:
    """The callee is registered but never runs: the await stays suspended."""
    from ambrosia_ic import registry

    rp, sp, icp = free_ports(3)
    registry.register(instance_name="calc", receive_port=rp, send_port=sp, ic_port=icp,
                      log_dir=str(launcher.home / "logs"), home=launcher.home)


@pytest.mark.integration
def test_a_real_run_warns_live_and_recovers_quietly(launcher: Launcher) -> None:
    _register_calc(launcher)
    p = launcher.start("tests.runtime.apps:ImpulsedPatient", "patient")
    p.wait_for("patient padded 15")
    warned = [WARNED.match(line) for line in p.lines if "every checkpoint" in line]
    # Each pad adds about 200 bytes: the 5th passes 1000, the 10th 2000; 4000 is not reached.
    assert [int(m.group(1)) for m in warned if m] == [6, 11] and len(warned) == 2
    assert [int(m.group(2)) // 1000 for m in warned if m] == [1, 2]
    p.kill()
    # A replay of the log, then a load of the checkpoint that carries the journal.
    p = launcher.start("tests.runtime.apps:ImpulsedPatient", "patient")
    wait_until(lambda: max(checkpoints("patient", launcher.home), default=0) >= 2,
               "the patient's second checkpoint")
    p.stop()
    assert not any("every checkpoint" in line for line in p.lines)
    p = launcher.start("tests.runtime.apps:ImpulsedPatient", "patient")
    p.stop()
    assert not any("every checkpoint" in line for line in p.lines)
    assert any("re-dispatching 16 inputs to rebuild suspended calls" in line
               for line in p.lines)
    state = repro("patient", ImpulsedPatient, home=launcher.home).state
    assert (state.padded, state.outcome) == (15, "")


@pytest.mark.integration
def test_a_real_run_gives_up_past_the_limit_and_stays_small(launcher: Launcher) -> None:
    _register_calc(launcher)
    p = launcher.start("tests.runtime.apps:ImpulsedBoundedPatient", "patient")
    line = p.wait_for("patient gave up: ")
    assert re.fullmatch(r".* patient gave up: divide \(call 1\) was abandoned: the 16 inputs "
                        r"\(3\d{3} bytes\) carried since handlers were suspended passed "
                        r"journal_limit_bytes=3000", line)
    p.wait_for("patient padded 20")
    p.kill()
    p = launcher.start("tests.runtime.apps:ImpulsedBoundedPatient", "patient")
    wait_until(lambda: max(checkpoints("patient", launcher.home), default=0) >= 2,
               "the patient's second checkpoint")
    p.stop()
    # Replayed, it gave up at the same input, so its checkpoints carry no journal.
    assert not any("gave up" in ln or "re-dispatching" in ln for ln in p.lines)
    p = launcher.start("tests.runtime.apps:ImpulsedBoundedPatient", "patient")
    p.stop()
    assert not any("re-dispatching" in ln for ln in p.lines)
    state = repro("patient", ImpulsedBoundedPatient, home=launcher.home).state
    assert state.padded == 20 and state.outcome == "JournalLimitError: " + line.split(
        "patient gave up: ")[1]


def test_a_checkpoint_keeps_the_journal_form_earlier_versions_wrote_and_loads_it() -> None:
    """Typed records in memory, the same msgpack lists and mode letters in the checkpoint:
    a checkpoint written before the records were typed is the same bytes, and loads."""
    ic = InMemoryCoordinator(Engine(Patient, "patient"))
    ic.first_start()
    _pad(ic, 0)
    mode, journal = _checkpoint(ic)
    assert mode == "p"
    assert journal == [["i", ic.log[0][2:]], ["r", PAD, int(RpcType.FORK), _pad_args(0), 0]]
    again = InMemoryCoordinator(Engine(Patient, "patient"))
    again.recover(ic.checkpoint, [])
    assert not again.engine.quiescent and again.engine.pending_calls == 1
    assert again.engine.instance.padded == 1  # type: ignore[union-attr]
