"""The programming model: ``Immortal``, ``@rpc`` / ``@fork`` / ``@impulse``, proxies.

A user subclasses ``Immortal``; its state is its ordinary attributes. Decorators only mark
methods; ``Immortal.__init_subclass__`` validates the whole class and raises one
``ImmortalDefinitionError`` listing every problem (``definition``; the decorators, method
specs and the checks of one method live in ``methods``; their names are importable from
here too).

The arrow between the API and the runtime points down: the API imports the runtime's
nothing and the runtime imports nothing of the API. The runtime (``ambrosia_py.runtime``)
knows an immortal class as ``methods.Hosted``, which ``__init_subclass__`` fills in
(method tables, serializer, how the state is checkpointed) and ``__ambrosia_attach__``
completes (it builds the instance's ``context.ImmortalContext``); instances reach the
runtime only through ``context.Runtime``. Nothing here touches a socket.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from ambrosia_core.errors import LocalProtocolError

from . import upgrading
from .context import ImmortalContext, Runtime
from .definition import check_definition
from .methods import POST_BY_IMPULSE_METHOD_ID as POST_BY_IMPULSE_METHOD_ID
from .methods import POST_METHOD_ID as POST_METHOD_ID
from .methods import RESERVED_METHOD_IDS as RESERVED_METHOD_IDS
from .methods import RESULT_METHOD_ID as RESULT_METHOD_ID
from .methods import MethodKind, MethodSpec, PendingCall, StateForm, state_types
from .methods import default_method_id as default_method_id
from .methods import fork as fork
from .methods import gather as gather
from .methods import impulse as impulse
from .methods import rpc as rpc
from .serialization import Serializer
from .stopping import StopReason

__all__ = [
    "RESERVED_METHOD_IDS",
    "Immortal",
    "ImmortalProxy",
    "JsProxy",
    "MethodKind",
    "MethodRef",
    "MethodSpec",
    "PendingCall",
    "default_method_id",
    "fork",
    "gather",
    "impulse",
    "rpc",
]

IM = TypeVar("IM", bound="Immortal")


class Immortal:
    """Base class of immortal services.

    State is the instance's public attributes (or its attrs fields), checkpointed with
    msgpack. The class must be constructible with no arguments (the runtime creates it,
    then loads state). Two ways to checkpoint something else, each a pair overridden
    together:

    - object level: ``checkpoint_state()`` returns one serializable value and
      ``load_state(value)`` takes it back on a fresh instance;
    - stream level (a producer and a consumer, for state too large to copy):
      ``checkpoint_producer()`` returns an iterable of ``bytes`` chunks (a generator is
      the natural form) and ``checkpoint_consumer(chunks)`` reads an iterator of chunks
      on a fresh instance. The consumer sees the same bytes in the same order, in chunks
      of at most 1 MiB (the producer's boundaries are not kept). Chunks go to the
      coordinator as they are produced; neither side holds the whole checkpoint.

    Class attributes:
        version: the code version (stored in checkpoints, compared on load).
        remote_errors: exception types that callers re-raise as themselves when this
            immortal's ``@rpc`` methods raise them (others arrive as ``RemoteCallError``).
        journal_warning_bytes: while a handler is suspended on ``await``, every
            checkpoint carries all inputs handled since it began; a warning is logged when
            they pass this many bytes, and again at each doubling (None: never).
        journal_limit_bytes: past this many bytes, the suspended awaits fail with
            ``JournalLimitError``, oldest first, until none is suspended and checkpoints
            are small again (None, the default: no limit).
    """

    __slots__ = ("_ambrosia_ctx",)

    __ambrosia_methods__: ClassVar[dict[str, MethodSpec]] = {}
    __ambrosia_by_id__: ClassVar[dict[int, MethodSpec]] = {}
    __ambrosia_serializer__: ClassVar[Serializer]
    __ambrosia_state_types__: ClassVar[dict[str, Any]] = {}
    __ambrosia_state_form__: ClassVar[StateForm] = StateForm.ATTRIBUTES
    version: ClassVar[int] = 0
    remote_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    journal_warning_bytes: ClassVar[int | None] = 1 << 20
    journal_limit_bytes: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        methods, by_id, form = check_definition(cls, Immortal)
        cls.__ambrosia_methods__ = methods
        cls.__ambrosia_by_id__ = by_id
        cls.__ambrosia_serializer__ = Serializer()
        cls.__ambrosia_state_types__ = state_types(cls)
        # Recorded once, so the runtime's checkpoint code reads the form instead of
        # comparing the class's methods with this base class's.
        cls.__ambrosia_state_form__ = form
        if "upgrade_from" not in vars(cls):
            # The default rule, not whatever a base converted from: see ``upgrading``.
            cls.upgrade_from = vars(Immortal)["upgrade_from"]  # type: ignore[method-assign]

    # ------------------------------------------------------------ runtime access
    def __ambrosia_attach__(self, runtime: Runtime, instance_name: str,
                            logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """Called by the runtime on each instance it creates: builds ``self.ctx``.

        ``object.__setattr__`` because a frozen attrs class refuses plain assignment.
        """
        object.__setattr__(self, "_ambrosia_ctx", ImmortalContext(runtime, instance_name,
                                                                  logger))

    @property
    def ctx(self) -> ImmortalContext:
        """The instance's context: is_primary, is_replaying, now(), random(), ..."""
        try:
            return self._ambrosia_ctx  # type: ignore[attr-defined]
        except AttributeError:
            raise LocalProtocolError(
                f"{type(self).__qualname__} is not attached to a runtime yet (ctx is only "
                "available once the runtime has created the instance)"
            ) from None

    def immortal(self, name: str, cls: type[IM]) -> ImmortalProxy[IM]:
        """A proxy for calling instance ``name`` whose code is ``cls``.

        Inside a handler: ``await proxy.m(...)`` for ``@rpc`` methods, ``proxy.m(...)`` or
        ``proxy.m.fork(...)`` to fire and forget. From outside-world code (threads and
        tasks started when primary): ``proxy.m.impulse(...)``.
        """
        return ImmortalProxy(self.ctx, name, cls, impulse=False)

    def js_immortal(self, name: str) -> JsProxy:
        """A proxy for an AmbrosiaJS instance: ``await proxy.post("method", arg=...)``,
        ``proxy.fork(method_id, {json} or b"raw")``, ``proxy.impulse(...)``."""
        return JsProxy(self.ctx, name)

    @property
    def self_proxy(self) -> ImmortalProxy[Any]:
        """This instance, as a proxy (forks to itself from handlers)."""
        return ImmortalProxy(self.ctx, self.ctx.instance_name, type(self), impulse=False)

    @property
    def impulse_self(self) -> ImmortalProxy[Any]:
        """This instance, as a proxy whose calls are Impulses: how outside-world code
        feeds results back as logged inputs. Legal only when primary."""
        return ImmortalProxy(self.ctx, self.ctx.instance_name, type(self), impulse=True)

    # ------------------------------------------------------------ lifecycle hooks
    def on_first_start(self) -> Any:
        """Called once in the instance's history, as a logged input (replayed after a crash).

        May be ``async``; may call other immortals (e.g. fork a method to itself)."""

    def on_checkpoint_loaded(self) -> None:
        """A checkpoint was loaded (recovery has begun)."""

    def on_recovery_complete(self, messages_replayed: int) -> None:
        """Replay is over."""

    def on_become_primary(self) -> None:
        """The instance is primary: the place to start side effects (threads, sockets).

        Side effects feed results back with ``self.impulse_self.method(...)``."""

    def on_upgrade(self, live: bool) -> None:
        """Called on the new version's instance right after an upgrade switched to it."""

    def on_stop(self, reason: StopReason) -> None:
        """The primary stops (``reason`` says why), just before its side-effect tasks are
        cancelled; they can read ``self.ctx.stop_reason`` too. Not a logged input: no
        state change, no calls. Handy to tell what a side effect holds for the instance
        whether it was stopped (``STOPPED``) or taken over (``COORDINATOR_LOST``)."""

    @classmethod
    @upgrading.mark_default
    def upgrade_from(cls: type[IM], previous: Immortal) -> IM:
        """Build this (VNext) class's instance from the VCurrent one. Override to convert.

        The default is the identity on ``previous``'s checkpointed state, when this class
        keeps its state as ``type(previous)`` does (the same checkpoint methods, or the
        same attributes): a next version that changes only code needs no conversion.
        Otherwise a base class's own ``upgrade_from`` is used if this class keeps its
        state exactly as that base does; otherwise ``UpgradeError`` names the difference.
        A conversion is never inherited by a class that changes the state it was written
        for, so nothing the class added is silently left out.

        Raises:
            UpgradeError: the state differs and this class says nothing of how to convert.
        """
        return upgrading.default_conversion(cls, previous)

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """Refuse a configuration (``ctx.config``) this class cannot run with, before
        anything is written: ``ambrosia run`` asks it before it registers the instance or
        starts a coordinator, and the binding's own entry point before it connects.

        Raise a ``UsageError`` (``ambrosia_py.runtime.config.ConfigError`` will do) whose
        one line names the key and why. Check only what the configuration says (keys,
        types, values, files it names): no sockets, nothing written. The default accepts
        any configuration; a class that reads its configuration in ``on_become_primary``
        should refuse here what it would refuse there.
        """

    @classmethod
    def keep_state(cls: type[IM], previous: Immortal) -> IM:
        """A new instance holding ``previous``'s state unchanged, as its checkpoint would
        bring it back: for an ``upgrade_from`` of a class whose state is the same as the
        previous version's though the two were written apart (a copy of the class)."""
        return upgrading.keep_state(cls, previous)

    @classmethod
    def upgrade_problem(cls, previous_cls: type[Immortal]) -> str | None:
        """Why a live upgrade from ``previous_cls`` to this class cannot convert the state,
        or None: asked before an upgrade is registered, so that a class that cannot take
        the state is refused before anything changes (the conversion checks again)."""
        if not upgrading.is_default(cls):
            return None  # it says how to convert
        try:
            sample: Immortal | None = previous_cls()
        except Exception:
            sample = None  # its __init__ needs the runtime: compared by class alone
        return upgrading.conversion_problem(cls, previous_cls, sample)

    # ------------------------------------------------------------ state
    def checkpoint_state(self) -> Any:
        """Override (with ``load_state``) to checkpoint something other than the attributes."""
        raise NotImplementedError

    def load_state(self, state: Any) -> None:
        """Override (with ``checkpoint_state``): set up a fresh instance from ``state``."""
        raise NotImplementedError

    def checkpoint_producer(self) -> Iterable[bytes]:
        """Override (with ``checkpoint_consumer``) to stream the checkpoint as byte chunks."""
        raise NotImplementedError

    def checkpoint_consumer(self, chunks: Iterator[bytes]) -> None:
        """Override (with ``checkpoint_producer``): rebuild a fresh instance from the
        chunks the producer wrote."""
        raise NotImplementedError


# ---------------------------------------------------------------- proxies
class MethodRef:
    """``proxy.method``: call it, ``.fork(...)`` it, or ``.impulse(...)`` it."""

    __slots__ = ("_cls", "_ctx", "_dest", "_impulse", "_spec")

    def __init__(self, ctx: ImmortalContext, dest: str, cls: type[Immortal], spec: MethodSpec,
                 impulse: bool):
        self._ctx = ctx
        self._dest = dest
        self._cls = cls
        self._spec = spec
        self._impulse = impulse

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._impulse:
            return self.impulse(*args, **kwargs)
        if self._spec.kind is MethodKind.RPC:
            return self._ctx.runtime.call(self._dest, self._cls, self._spec, args, kwargs)
        self._ctx.runtime.fork(self._dest, self._spec, args, kwargs)  # ``fork``, one call less
        return None

    def fork(self, *args: Any, **kwargs: Any) -> None:
        """Fire and forget (from a handler)."""
        self._ctx.runtime.fork(self._dest, self._spec, args, kwargs)

    def impulse(self, *args: Any, **kwargs: Any) -> None:
        """Send as an Impulse (from outside-world code, when primary; thread-safe).

        From a thread, this waits while about 1 MiB of Impulses is queued and the
        coordinator is not taking them (back-pressure instead of unbounded memory)."""
        self._ctx.runtime.impulse(self._dest, self._spec, args, kwargs)

    def __repr__(self) -> str:
        return f"<{self._spec.kind.value} {self._dest or 'self'}.{self._spec.name}>"


class ImmortalProxy(Generic[IM]):
    """Calls to another immortal (or this one), typed by its class."""

    __slots__ = ("_cls", "_ctx", "_dest", "_impulse", "_refs")

    def __init__(self, ctx: ImmortalContext, dest: str, cls: type[IM], *, impulse: bool):
        if not (isinstance(cls, type) and issubclass(cls, Immortal)):
            raise TypeError(f"a proxy needs an Immortal subclass, got {cls!r}")
        self._ctx = ctx
        self._dest = dest
        self._cls = cls
        self._impulse = impulse
        # Each method's reference, made on first use: a loop of forks asks for the same
        # one every time, and a MethodRef holds nothing that changes.
        self._refs: dict[str, MethodRef] = {}

    def __getattr__(self, name: str) -> MethodRef:
        ref = self._refs.get(name)
        if ref is not None:
            return ref
        spec = self._cls.__ambrosia_methods__.get(name)
        if spec is None:
            published = ", ".join(sorted(self._cls.__ambrosia_methods__)) or "none"
            raise AttributeError(
                f"{self._cls.__qualname__} publishes no method {name!r} (published: {published})"
            )
        ref = self._refs[name] = MethodRef(self._ctx, self._dest, self._cls, spec,
                                           self._impulse)
        return ref

    def __repr__(self) -> str:
        return f"<ImmortalProxy {self._dest!r} ({self._cls.__qualname__})>"


class JsProxy:
    """Calls to an AmbrosiaJS instance, in AmbrosiaJS's own forms.

    ``fork``/``impulse`` send ``[method id][1 or 2][args]`` where args are a dict as UTF-8
    JSON (compact, non-ASCII kept) or bytes as ``0xFF`` + the bytes. ``post`` sends a Fork
    to method -1 whose JSON holds ``senderInstanceName``, ``destinationInstanceName``,
    ``methodName``, ``methodVersion`` (1), ``callID`` and one ``arg:<name>`` per keyword;
    awaiting it gives the ``result`` of the ``<name>_Result`` post that comes back, or
    raises ``RemoteCallError`` carrying its ``errorMsg``. A void JS method's result (the
    placeholder ``"__UNDEFINED__"``) arrives as ``None``.

    Calls the other way need nothing special: AmbrosiaJS's JSON and raw-bytes forks reach
    the published method with that id (JSON fields as keyword arguments, loaded as the
    annotated types; raw bytes as one ``bytes`` argument), and its posts reach the
    published method of that name, answered with ``<name>_Result``; ``arg:<name>?`` (an
    optional JS parameter) fills the parameter ``<name>``, and a void method's ``None`` is
    answered with ``"__UNDEFINED__"`` (JS sees ``undefined``) while a ``None`` from a method
    declared to return a value is JSON ``null``.
    """

    __slots__ = ("_ctx", "_dest")

    def __init__(self, ctx: ImmortalContext, dest: str) -> None:
        self._ctx = ctx
        self._dest = dest

    def post(self, method_name: str, /, **args: Any) -> PendingCall[Any]:
        """AmbrosiaJS "post": an awaited call by name; the result is JSON."""
        return self._ctx.runtime.post(self._dest, method_name, args)

    def fork(self, method_id: int, args: dict[str, Any] | bytes) -> None:
        self._ctx.runtime.fork_raw(self._dest, method_id, args)

    def impulse(self, method_id: int, args: dict[str, Any] | bytes) -> None:
        self._ctx.runtime.impulse_raw(self._dest, method_id, args)
