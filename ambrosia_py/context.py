"""``self.ctx``: what a running immortal may ask of its runtime.

``now()`` and ``random()`` are replay-safe: their values come from the input being handled
(its logged header), so a replay sees the same ones. Outside a handler they fall back to
the real clock and ``os.urandom``; that is only legal in outside-world code.

The arrow between the API and the runtime: the API (``immortal``, ``context``) says what it
needs from a runtime in the ``Runtime`` protocol below and never names the runtime's
classes; the runtime's engine provides it. The runtime does not import this module: it
hands itself to ``Immortal.__ambrosia_attach__`` (part of ``methods.Hosted``), which
builds an ``ImmortalContext`` for each instance the runtime creates. Proxies send
through ``ctx.runtime``.
"""

from __future__ import annotations

import datetime
import logging
import random as _random
import typing
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from .stopping import StopReason

if typing.TYPE_CHECKING:
    import asyncio

    from .effects import Effect
    from .methods import Hosted, MethodSpec, PendingCall

__all__ = ["ImmortalContext", "InputHeader", "Runtime"]


class InputHeader(Protocol):
    """The logged input being handled, as the context reads it."""

    timestamp_ns: int

    @property
    def rng(self) -> _random.Random: ...


class Runtime(Protocol):
    """What the API asks of the runtime that runs an instance (the engine provides it)."""

    log_replay: bool

    @property
    def config(self) -> Mapping[str, Any]: ...

    @property
    def is_primary(self) -> bool: ...

    @property
    def is_replaying(self) -> bool: ...

    @property
    def stop_reason(self) -> StopReason | None: ...

    @property
    def current_input(self) -> InputHeader | None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def watch_inputs(self, wake: Callable[[], None]) -> None: ...

    def request_checkpoint(self) -> None: ...

    def call(self, dest: str, cls: type[Hosted], spec: MethodSpec, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> PendingCall[Any]: ...

    def fork(self, dest: str, spec: MethodSpec, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> None: ...

    def impulse(self, dest: str, spec: MethodSpec, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> None: ...

    def post(self, dest: str, method_name: str, args: dict[str, Any]) -> PendingCall[Any]: ...

    def fork_raw(self, dest: str, method_id: int, args: dict[str, Any] | bytes) -> None: ...

    def impulse_raw(self, dest: str, method_id: int, args: dict[str, Any] | bytes) -> None: ...


class ImmortalContext:
    """The runtime's face towards one immortal instance."""

    def __init__(self, runtime: Runtime, instance_name: str,
                 logger: logging.LoggerAdapter[logging.Logger]) -> None:
        #: The runtime running this instance; the proxies send through it.
        self.runtime = runtime
        self.instance_name = instance_name
        #: The instance's logger. Lines logged while handling a replayed input are dropped
        #: (they were printed when the input was first handled), or shown with a ``[replay] ``
        #: mark when replay logging is on (``AMBROSIA_LOG_REPLAY=1``, or
        #: ``ctx.log_replay = True``).
        self.log = logger

    @property
    def config(self) -> Mapping[str, Any]:
        """The instance's configuration (``--config FILE`` and ``--set KEY=VALUE``), a
        read-only mapping; empty when none was given.

        It is outside-world input: a later life (or a replay) may be given another one.
        Read it to decide side effects (where to listen, what to connect to); a handler
        that changes state because of it must get it as an Impulse's argument, sent when
        primary, so that the log holds it."""
        return self.runtime.config

    @property
    def is_primary(self) -> bool:
        """True once the instance is primary: Impulses and side effects are allowed."""
        return self.runtime.is_primary

    @property
    def is_replaying(self) -> bool:
        """True while the inputs being handled are replays of an earlier life's."""
        return self.runtime.is_replaying

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the instance stops, once the runtime stops it (None until then): side
        effects read it when they are cancelled, to end an ordinary stop
        (``StopReason.STOPPED``) otherwise than a lost coordinator."""
        return self.runtime.stop_reason

    @property
    def log_replay(self) -> bool:
        """Whether lines logged during replay are shown (marked ``[replay] ``)."""
        return self.runtime.log_replay

    @log_replay.setter
    def log_replay(self, on: bool) -> None:
        self.runtime.log_replay = on

    @property
    def in_handler(self) -> bool:
        """True while a logged input is being handled (deterministic code)."""
        return self.runtime.current_input is not None

    def now(self) -> datetime.datetime:
        """The logged time of the input being handled (UTC); the wall clock outside one."""
        cur = self.runtime.current_input
        if cur is None:
            return datetime.datetime.now(datetime.UTC)
        return datetime.datetime.fromtimestamp(cur.timestamp_ns / 1e9, datetime.UTC)

    def random(self) -> float:
        """A float in [0, 1) from a PRNG seeded by the input's logged entropy."""
        return self.rng.random()

    @property
    def rng(self) -> _random.Random:
        """The replay-safe PRNG of the input being handled."""
        cur = self.runtime.current_input
        if cur is None:
            return _random.Random()  # seeded from os.urandom: outside-world code only
        return cur.rng

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run outside-world code (a side effect) as an asyncio task, only when primary;
        it is cancelled when the immortal stops."""
        return self.runtime.spawn(coro)

    def run_effects(self, effects: Effect) -> asyncio.Task[Any]:
        """Run long-lived side effects, only when primary (``ambrosia_py.effects``: an
        ``Effects`` driver, or any object with ``run`` and ``wake``): ``run`` as a task,
        cancelled when the immortal stops, and ``wake`` after every run of inputs the
        instance applies from now on, so that it follows what the handlers decided."""
        task = self.runtime.spawn(effects.run())
        self.runtime.watch_inputs(effects.wake)
        return task

    def request_checkpoint(self) -> None:
        """Ask the coordinator for a checkpoint now (when primary)."""
        self.runtime.request_checkpoint()
