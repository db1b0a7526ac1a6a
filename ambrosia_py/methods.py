"""What a published method is: the decorators (``@rpc``, ``@fork``, ``@impulse``), its
kind and id, its spec as the runtime sees it, the checks of its definition, and
``PendingCall``, what awaiting a call to an immortal gives. ``immortal`` builds classes
from these; the names are also importable from there.

``Hosted`` is the other half of the arrow between the API and the runtime: what the
runtime needs of a class it runs (its method tables, serializer, state form, lifecycle
hooks, and how to attach a context to an instance), stated here, below both, so the
runtime never imports ``immortal`` or ``context``. ``Immortal.__init_subclass__`` records
the class's side of it; ``context.Runtime`` is the runtime's side, seen from the API.
"""

from __future__ import annotations

import ast
import contextlib
import dis
import enum
import inspect
import logging
import textwrap
import typing
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import attrs

from .serialization import Serializer, check_serializable, inspect_empty
from .stopping import StopReason

__all__ = [
    "POST_BY_IMPULSE_METHOD_ID",
    "POST_METHOD_ID",
    "RESERVED_METHOD_IDS",
    "RESULT_METHOD_ID",
    "Hosted",
    "MethodKind",
    "MethodSpec",
    "PendingCall",
    "StateForm",
    "default_method_id",
    "fork",
    "gather",
    "impulse",
    "is_hosted_class",
    "rpc",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


# Method ids below zero belong to the system: AmbrosiaJS uses -1 for "post" calls and
# their results and -2 for post-by-impulse; ambrosia-py sends awaited results to -3.
POST_METHOD_ID = -1
POST_BY_IMPULSE_METHOD_ID = -2
RESULT_METHOD_ID = -3
RESERVED_METHOD_IDS = frozenset({POST_METHOD_ID, POST_BY_IMPULSE_METHOD_ID, RESULT_METHOD_ID})
METHOD_MARK = "__ambrosia_method__"


class MethodKind(enum.Enum):
    """What a published method is, as its decorator declares it (``@rpc``, ``@fork``,
    ``@impulse``): the user's view, deciding what a plain ``proxy.method(...)`` does.

    Not the wire's ``RpcType`` (the byte after an RPC's method id), which says how one call
    travels and is chosen by the way it is sent, not by the method: an awaited call and
    ``.fork(...)`` go as ``RpcType.FORK`` (the awaited call's envelope carries a call id
    and its result comes back as a fork to ``RESULT_METHOD_ID``), ``.impulse(...)`` and
    ``impulse_self`` as ``RpcType.IMPULSE``; ``RpcType.ASYNC`` is never sent.
    """

    RPC = "rpc"  # async/await: the caller awaits the result
    FORK = "fork"  # fire and forget
    IMPULSE = "impulse"  # input from the outside world, sent only when primary


def default_method_id(name: str) -> int:
    """A stable id from a method's name: CRC-32 masked to a positive 30-bit int."""
    return zlib.crc32(name.encode("utf-8")) & 0x3FFFFFFF


@attrs.frozen
class MethodMark:
    kind: MethodKind
    method_id: int | None


def _decorator(kind: MethodKind) -> Any:
    def decorate(func: Any = None, *, method_id: int | None = None) -> Any:
        def mark(f: F) -> F:
            # Not a function: __init_subclass__ reports it.
            with contextlib.suppress(AttributeError, TypeError):
                setattr(f, METHOD_MARK, MethodMark(kind, method_id))
            return f

        if func is None:
            return mark
        return mark(func)

    decorate.__name__ = kind.value
    decorate.__doc__ = f"Publish a method as an immortal's {kind.value} method."
    return decorate


rpc = _decorator(MethodKind.RPC)
rpc.__doc__ = """Publish an ``async def`` method; callers ``await proxy.method(...)`` its result.

Exceptions raised by the method travel back to the caller as ``RemoteCallError`` (or as
the original type when it is listed in the callee class's ``remote_errors``).
Use as ``@rpc`` or ``@rpc(method_id=N)``."""
fork = _decorator(MethodKind.FORK)
fork.__doc__ = """Publish a fire-and-forget method (``def`` or ``async def``)."""
impulse = _decorator(MethodKind.IMPULSE)
impulse.__doc__ = """Publish a method the outside world calls (as an Impulse) when primary."""


@attrs.frozen
class MethodSpec:
    """A published method as the runtime sees it."""

    name: str
    kind: MethodKind
    method_id: int
    func: Callable[..., Any]
    is_coroutine: bool
    may_suspend: bool  # contains an await: a handler may be left suspended
    signature: inspect.Signature
    hints: dict[str, Any]

    @property
    def return_type(self) -> Any:
        return self.hints.get("return", inspect_empty)

    def param_type(self, name: str) -> Any:
        return self.hints.get(name, inspect_empty)


_AWAIT_OPS = frozenset({"GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH",
                        "SEND", "YIELD_FROM"})


def _may_suspend(func: Callable[..., Any]) -> bool:
    """Whether a coroutine function's body awaits anything (statically, from its bytecode)."""
    code = getattr(func, "__code__", None)
    if code is None:
        return True
    return any(ins.opname in _AWAIT_OPS for ins in dis.get_instructions(code))


def _resolve_hints(func: Callable[..., Any], cls: type) -> tuple[dict[str, Any], list[str]]:
    problems = []
    try:
        hints = typing.get_type_hints(func, include_extras=False)
    except Exception as e:  # NameError for forward references, TypeError for bad ones
        problems.append(f"{func.__name__}: type annotations cannot be resolved ({e})")
        hints = {}
    return hints, problems


def validate_method(cls: type, name: str, attr: Any, mark: MethodMark) -> tuple[
    MethodSpec | None, list[str]
]:
    problems: list[str] = []
    func = attr
    if not inspect.isfunction(func):
        return None, [f"{name}: @{mark.kind.value} must decorate a plain method (got "
                      f"{type(attr).__name__})"]
    is_coro = inspect.iscoroutinefunction(func)
    if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
        problems.append(f"{name}: @{mark.kind.value} cannot be a generator")
    elif mark.kind is MethodKind.RPC and not is_coro:
        problems.append(
            f"{name}: @rpc methods must be 'async def' (callers await their result)"
        )
    if mark.method_id is not None:
        mid = mark.method_id
        if not isinstance(mid, int) or isinstance(mid, bool):
            problems.append(f"{name}: method_id must be an int, got {mid!r}")
            mid = default_method_id(name)
        elif mid < 0:
            problems.append(f"{name}: method_id {mid} is negative; ids below 0 are reserved "
                            "for the system")
        elif mid > 0x7FFFFFFF:
            problems.append(f"{name}: method_id {mid} does not fit in 32 bits")
    else:
        mid = default_method_id(name)
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                            params[0].POSITIONAL_OR_KEYWORD):
        problems.append(f"{name}: a published method needs 'self' as its first parameter")
    hints, hint_problems = _resolve_hints(func, cls)
    problems.extend(hint_problems)
    for p in params[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            problems.append(f"{name}: parameter {p.name!r}: *args/**kwargs are not allowed in "
                            "a published method (its signature is its wire contract)")
            continue
        if p.name in hints:
            why = check_serializable(hints[p.name])
            if why:
                problems.append(f"{name}: parameter {p.name!r} is not serializable: {why}")
    if "return" in hints and mark.kind is MethodKind.RPC:
        why = check_serializable(hints["return"])
        if why:
            problems.append(f"{name}: its return type is not serializable: {why}")
    spec = MethodSpec(
        name=name,
        kind=mark.kind,
        method_id=mid,
        func=func,
        is_coroutine=is_coro,
        may_suspend=is_coro and _may_suspend(func),
        signature=sig,
        hints=hints,
    )
    return spec, problems


def state_types(cls: type) -> dict[str, Any]:
    """The types of the state attributes: class annotations, and ``self.x: T = ...`` in
    ``__init__`` (read from its source), so that checkpointed attrs classes, enums and
    dataclasses come back as themselves however the user declared them."""
    types: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = vars(klass).get("__init__")
        if klass is object or not inspect.isfunction(init):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(init))
            tree = ast.parse(source)
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute)
                    and isinstance(node.target.value, ast.Name)
                    and node.target.value.id == "self"):
                try:
                    types[node.target.attr] = eval(
                        compile(ast.Expression(node.annotation), "<annotation>", "eval"),
                        init.__globals__, dict(vars(klass)))
                except Exception:
                    continue
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    for name, tp in hints.items():
        if typing.get_origin(tp) is not ClassVar and tp is not ClassVar:
            types.setdefault(name, tp)
    return types


class PendingCall(Generic[T]):
    """An awaited call in flight; resolved by a result input, which the log records."""

    __slots__ = ("_done", "_error", "_result", "call_id", "method", "remote_errors",
                 "result_type")

    def __init__(self, call_id: int, method: str, result_type: Any = inspect_empty,
                 remote_errors: tuple[type[BaseException], ...] = ()) -> None:
        self.call_id = call_id
        self.method = method
        self.result_type = result_type
        self.remote_errors = remote_errors
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        self._done = True
        self._result = result
        self._error = error

    def outcome(self) -> T:
        if self._error is not None:
            raise self._error
        return self._result

    def __await__(self) -> Generator[Any, Any, T]:
        if not self._done:
            yield self
        return self.outcome()

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        return f"<PendingCall {self.method} #{self.call_id} {state}>"


async def gather(*calls: Any) -> list[Any]:
    """Await several calls; they are all in flight already, so this is their join."""
    return [await c for c in calls]


# ---------------------------------------------------------------- the hosted class
class StateForm(enum.Enum):
    """How a class's state goes into a checkpoint (recorded when the class is defined)."""

    ATTRIBUTES = "attributes"  # its public attributes (or attrs fields)
    OBJECT = "object"  # checkpoint_state() / load_state(value)
    STREAM = "stream"  # checkpoint_producer() / checkpoint_consumer(chunks)


class Hosted(Protocol):
    """What the runtime needs of the class it runs and of its instances.

    ``Immortal`` provides it: its ``__init_subclass__`` fills the class attributes; the
    runtime creates instances with no arguments and attaches a context to each through
    ``__ambrosia_attach__`` before anything else touches them.
    """

    __ambrosia_methods__: ClassVar[dict[str, MethodSpec]]
    __ambrosia_by_id__: ClassVar[dict[int, MethodSpec]]
    __ambrosia_serializer__: ClassVar[Serializer]
    __ambrosia_state_types__: ClassVar[dict[str, Any]]
    __ambrosia_state_form__: ClassVar[StateForm]
    version: ClassVar[int]
    remote_errors: ClassVar[tuple[type[BaseException], ...]]
    journal_warning_bytes: ClassVar[int | None]
    journal_limit_bytes: ClassVar[int | None]

    def __ambrosia_attach__(self, runtime: Any, instance_name: str,
                            logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """Give the instance its context; ``runtime`` provides ``context.Runtime``."""

    @classmethod
    def upgrade_from(cls, previous: Any) -> Any: ...

    @classmethod
    def upgrade_problem(cls, previous_cls: Any) -> str | None: ...

    @classmethod
    def check_config(cls, config: Any) -> None: ...

    def on_first_start(self) -> Any: ...

    def on_checkpoint_loaded(self) -> None: ...

    def on_recovery_complete(self, records_replayed: int) -> None: ...

    def on_become_primary(self) -> None: ...

    def on_upgrade(self, live: bool) -> None: ...

    def on_stop(self, reason: StopReason) -> None: ...

    def checkpoint_state(self) -> Any: ...

    def load_state(self, state: Any) -> None: ...

    def checkpoint_producer(self) -> Iterable[bytes]: ...

    def checkpoint_consumer(self, chunks: Iterator[bytes]) -> None: ...


def is_hosted_class(obj: Any) -> bool:
    """Whether ``obj`` is a class the runtime can run (``Immortal`` or a subclass)."""
    return isinstance(obj, type) and isinstance(
        getattr(obj, "__ambrosia_state_form__", None), StateForm)
