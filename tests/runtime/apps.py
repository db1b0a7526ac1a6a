"""Immortals used by the runtime's tests (module level, so `ambrosia run` can import them)."""

from __future__ import annotations

import asyncio
import hashlib
import random
import struct
import threading
import time
from collections.abc import Iterator

import attrs

from ambrosia_py import (
    AmbrosiaError,
    Immortal,
    ImpulseDuringRecoveryError,
    StopReason,
    fork,
    impulse,
    rpc,
)
from ambrosia_py.errors import JournalLimitError


@attrs.define
class Entry:
    n: int
    note: str = ""


class Calculator(Immortal):
    """A callee with typed arguments (an attrs class) and a registered error type."""

    remote_errors = (ZeroDivisionError,)

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    @rpc
    async def divide(self, a: int, b: int) -> float:
        return a / b

    @rpc
    async def store(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        self.ctx.log.info("calc: stored %r", entry)
        return Entry(entry.n * 2, entry.note.upper())

    @rpc
    async def fail(self, message: str) -> None:
        raise KeyError(message)


class Caller(Immortal):
    """Awaits a Calculator ("calc") from its first start; survives crashes while waiting."""

    def __init__(self) -> None:
        self.results: list[object] = []

    async def on_first_start(self) -> None:
        calc = self.immortal("calc", Calculator)
        self.ctx.log.info("caller: awaiting calc")
        self.results.append(await calc.divide(7, 2))
        try:
            await calc.divide(1, 0)
        except ZeroDivisionError as e:
            self.results.append(f"ZeroDivisionError: {e}")
        stored = await calc.store(Entry(21, "hi"))
        self.results.append([stored.n, stored.note])
        try:
            await calc.fail("nope")
        except Exception as e:
            self.results.append(type(e).__name__)
        self.ctx.log.info("caller: done %s", self.results)


class Configured(Immortal):
    """Awaits itself 30 times from its first start when its configuration says so
    (``--set ask_self=true``): a repro without that configuration diverges."""

    def __init__(self) -> None:
        self.doubled: list[int] = []

    async def on_first_start(self) -> None:
        if not self.ctx.config.get("ask_self"):
            return
        for i in range(30):
            self.doubled.append(await self.self_proxy.double(i))
        self.ctx.log.info("configured: done")

    @rpc
    async def double(self, x: int) -> int:
        return 2 * x


class Clocked(Immortal):
    """Uses the replay-safe clock and PRNG: a repro reproduces its state and outputs."""

    def __init__(self) -> None:
        self.samples: list[list[float]] = []

    def on_first_start(self) -> None:
        self.self_proxy.sample(3)

    @fork
    def sample(self, left: int) -> None:
        self.samples.append([self.ctx.now().timestamp(), self.ctx.random()])
        self.ctx.log.info("sampled %d", len(self.samples))
        if left > 1:
            self.self_proxy.sample(left - 1)


class Nondeterministic(Immortal):
    """Reads the real clock inside a handler: its replay diverges from the recorded run."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_first_start(self) -> None:
        self.self_proxy.tick(3)

    @fork
    def tick(self, left: int, stamp: int = 0) -> None:
        self.seen.append(left)
        self.ctx.log.info("tick %d", left)
        if left > 1:
            self.self_proxy.tick.fork(left - 1, stamp=time.time_ns())  # wrong: not ctx.now()


class Pulsed(Immortal):
    """Outside-world code (a thread started when primary) feeds Impulses back; an Impulse
    attempted during recovery is refused."""

    def __init__(self) -> None:
        self.pulses: list[int] = []

    def on_checkpoint_loaded(self) -> None:
        try:
            self.impulse_self.pulse(-1)
        except ImpulseDuringRecoveryError as e:
            self.ctx.log.info("impulse refused during recovery: %s", e)

    def on_become_primary(self) -> None:
        start = len(self.pulses)

        def outside_world() -> None:
            for i in range(start, start + 3):
                self.impulse_self.pulse(i)

        threading.Thread(target=outside_world, daemon=True).start()

    @impulse
    def pulse(self, n: int) -> None:
        self.pulses.append(n)
        self.ctx.log.info("pulse %d (total %d)", n, len(self.pulses))


class Stopping(Immortal):
    """A side effect that, cancelled at the stop, says why and records it with an
    Impulse, waiting for it to come back handled (only an ordinary stop still logs)."""

    def __init__(self) -> None:
        self.stops: list[str] = []
        self._recorded: asyncio.Event | None = None  # the primary's; never state

    def on_stop(self, reason: StopReason) -> None:
        self.ctx.log.info("on_stop %s", reason.name)

    def on_become_primary(self) -> None:
        self._recorded = asyncio.Event()
        self.ctx.spawn(self._hold(self._recorded))

    async def _hold(self, recorded: asyncio.Event) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            reason = self.ctx.stop_reason
            assert reason is not None
            self.ctx.log.info("side effect cancelled: %s", reason.name)
            try:
                self.impulse_self.stopped(reason.name)
            except AmbrosiaError as e:
                self.ctx.log.info("impulse refused at the stop: %s", e)
                raise
            async with asyncio.timeout(5):
                await recorded.wait()
            raise

    @impulse
    def stopped(self, reason: str) -> None:
        self.stops.append(reason)
        self.ctx.log.info("stop recorded: %s", reason)
        if self._recorded is not None and self.ctx.is_primary and not self.ctx.is_replaying:
            self._recorded.set()


BLOB_SIZE = 4 << 20
BLOB_SEED = 7
POKES = 3


def expected_blob() -> bytearray:
    """What the checkpointed immortals below hold once their pokes are done."""
    blob = bytearray(random.Random(BLOB_SEED).randbytes(BLOB_SIZE))
    for i in range(POKES):
        blob[i * 4096] ^= 0xFF
    return blob


class _Blob(Immortal):
    """A large bytearray built by a fork, checkpointed, then changed by more forks."""

    def __init__(self) -> None:
        self.blob = bytearray()
        self.pokes = 0

    def on_first_start(self) -> None:
        self.self_proxy.fill(BLOB_SIZE, BLOB_SEED)

    @fork
    def fill(self, size: int, seed: int) -> None:
        self.blob = bytearray(random.Random(seed).randbytes(size))
        if not self.ctx.is_replaying:
            self.ctx.request_checkpoint()
        self.self_proxy.poke(0)

    @fork
    def poke(self, index: int) -> None:
        self.blob[index * 4096] ^= 0xFF
        self.pokes += 1
        self.ctx.log.info("after %d pokes: %s", self.pokes, self.digest())
        if self.pokes < POKES:
            self.self_proxy.poke(index + 1)

    def digest(self) -> str:
        return f"{len(self.blob)} bytes sha256 {hashlib.sha256(self.blob).hexdigest()}"

    def on_become_primary(self) -> None:
        self.ctx.log.info("primary with %d pokes: %s", self.pokes, self.digest())


class StreamedBlob(_Blob):
    """Checkpoints through its own producer and consumer of byte chunks."""

    def checkpoint_producer(self) -> Iterator[bytes]:
        yield struct.pack("<QQ", len(self.blob), self.pokes)
        view = memoryview(self.blob)
        for i in range(0, len(view), 300_000):
            yield view[i:i + 300_000]

    def checkpoint_consumer(self, chunks: Iterator[bytes]) -> None:
        buf = bytearray()
        n = 0
        for chunk in chunks:
            buf += chunk
            n += 1
        size, self.pokes = struct.unpack_from("<QQ", buf)
        self.blob = buf[16:]
        assert len(self.blob) == size
        self.ctx.log.info("consumer read %d chunks, %d bytes", n, len(buf))


class ObjectBlob(_Blob):
    """Checkpoints one object of its own making through checkpoint_state/load_state."""

    def checkpoint_state(self) -> dict[str, object]:
        return {"blob": bytes(self.blob), "pokes": self.pokes}

    def load_state(self, state: dict[str, object]) -> None:
        blob, pokes = state["blob"], state["pokes"]
        assert isinstance(blob, bytes) and isinstance(pokes, int)
        self.blob, self.pokes = bytearray(blob), pokes
        self.ctx.log.info("load_state got %d bytes", len(self.blob))


FLOOD = 8000
FLOOD_PAD = 4096


class Flooder(Immortal):
    """Outside-world code that sends Impulses as fast as it can (for back-pressure)."""

    def __init__(self) -> None:
        self.flooded = 0

    def on_become_primary(self) -> None:
        self._accepted = 0  # how many impulse() calls have returned (not state)
        self._sender = threading.Thread(target=self._flood, daemon=True)
        self._sender.start()

    def _flood(self) -> None:
        pad = b"p" * FLOOD_PAD
        for i in range(FLOOD):
            self.impulse_self.flood(i, pad)
            self._accepted += 1

    @impulse
    def flood(self, i: int, pad: bytes) -> None:
        self.flooded += 1


class BookV1(Immortal):
    """Version 1 of a guest book (names in a list), for live upgrades to ``BookV2``."""

    version = 1

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_first_start(self) -> None:
        for name in ("ada", "grace", "ada"):
            self.self_proxy.sign(name)

    @fork
    def sign(self, name: str) -> None:
        self.names.append(name)
        self.ctx.log.info("v1 signed by %s (%d signatures)", name, len(self.names))


class BookV2(Immortal):
    """Version 2: counts per name; once primary, a visitor from the outside world signs."""

    version = 2

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    @classmethod
    def upgrade_from(cls, previous: BookV1) -> BookV2:  # type: ignore[override]
        new = cls()
        for name in previous.names:
            new.counts[name.title()] = new.counts.get(name.title(), 0) + 1
        return new

    def on_first_start(self) -> None:  # replays v1's first start in an upgrade test
        for name in ("ada", "grace", "ada"):
            self.self_proxy.sign(name)

    def on_become_primary(self) -> None:
        if "Linus" not in self.counts:
            self.impulse_self.visit("linus")

    @impulse
    def visit(self, name: str) -> None:
        self.self_proxy.sign(name)

    @fork
    def sign(self, name: str) -> None:
        self.counts[name.title()] = self.counts.get(name.title(), 0) + 1
        self.ctx.log.info("v2 signed by %s (%d signatures)", name.title(),
                          sum(self.counts.values()))


class Patient(Immortal):
    """Awaits a call that is not answered while forks keep arriving: every checkpoint
    carries those forks."""

    journal_warning_bytes = 1000

    def __init__(self) -> None:
        self.padded = 0
        self.outcome = ""

    async def on_first_start(self) -> None:
        try:
            await self.immortal("calc", Calculator).divide(1, 2)
            self.outcome = "answered"
        except JournalLimitError as e:
            self.outcome = f"JournalLimitError: {e}"
            self.ctx.log.info("patient gave up: %s", e)

    @fork
    def pad(self, data: bytes) -> None:
        self.padded += 1
        self.ctx.log.info("patient padded %d", self.padded)


class BoundedPatient(Patient):
    """The same, with a limit: past it, the await fails and checkpoints shrink again."""

    journal_limit_bytes = 3000


def _send_pads(inst: Patient, count: int) -> None:
    """Outside-world code: ``count`` pads as Impulses, once in the instance's history."""
    if inst.padded == 0:
        threading.Thread(target=lambda: [inst.impulse_self.pad(bytes(150))
                                         for _ in range(count)], daemon=True).start()


class ImpulsedPatient(Patient):
    """Patient under `ambrosia run`: its pads come as Impulses once it is primary."""

    def on_become_primary(self) -> None:
        _send_pads(self, 15)


class ImpulsedBoundedPatient(BoundedPatient):
    def on_become_primary(self) -> None:
        _send_pads(self, 20)


class Waiters(Immortal):
    """Two handlers suspended at once, for the journal limit's order."""

    journal_warning_bytes = None
    journal_limit_bytes = 1000

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def on_first_start(self) -> None:
        self.self_proxy.wait(1)
        self.self_proxy.wait(2)

    @fork
    async def wait(self, n: int) -> None:
        try:
            await self.immortal("calc", Calculator).divide(n, 1)
        except JournalLimitError as e:
            self.outcomes.append(f"{n}: {e}")

    @fork
    def pad(self, data: bytes) -> None:
        pass


class FailingEffect(Immortal):
    """Its side effect sends one Impulse, then fails: the instance must stop, saying so."""

    def __init__(self) -> None:
        self.pokes = 0

    def on_become_primary(self) -> None:
        self.ctx.spawn(self._effect())

    async def _effect(self) -> None:
        self.impulse_self.poke()
        await asyncio.sleep(0.2)
        raise ValueError("the disk\nis   gone")

    @impulse
    def poke(self) -> None:
        self.pokes += 1
