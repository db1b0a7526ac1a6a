"""Class definition: every problem listed at once; method ids; the public API."""

from __future__ import annotations

import socket
import threading
from typing import NamedTuple

import msgpack
import pytest

import ambrosia_py
from ambrosia_py import (
    Immortal,
    ImmortalDefinitionError,
    MethodKind,
    default_method_id,
    fork,
    impulse,
    rpc,
)
from ambrosia_py.errors import SerializationError
from ambrosia_py.serialization import Serializer, check_serializable


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ImmortalDefinitionError) as info:

        class Bad(Immortal):
            def __init__(self, needed: int) -> None:
                self.needed = needed

            @rpc
            def not_a_coroutine(self) -> int:
                return 1

            @fork(method_id=5)
            def a(self, sock: socket.socket) -> None: ...

            @impulse(method_id=5)
            def b(self, *args: int) -> None: ...

            @fork(method_id=-1)
            def reserved(self) -> None: ...

            @rpc
            async def returns_lock(self) -> threading.Lock: ...  # type: ignore[empty-body]

    problems = info.value.problems
    assert str(info.value).startswith("Invalid immortal class")
    assert "for 7 reasons" in str(info.value)
    assert len(problems) == 7, problems
    joined = "\n".join(problems)
    for needle in ("@rpc methods must be 'async def'", "parameter 'sock' is not serializable",
                   "*args/**kwargs", "method id 5 clashes", "method_id -1 is negative",
                   "return type is not serializable", "__init__ must be callable with no"):
        assert needle in joined


def test_default_ids_are_stable_and_explicit_ids_are_kept() -> None:
    class Good(Immortal):
        @fork
        def tick(self) -> None: ...

        @rpc(method_id=8)
        async def ask(self, q: str) -> str:
            return q

    methods = Good.__ambrosia_methods__
    # Literals, not the formula: recorded logs name methods by these ids, so they may
    # never change. CRC-32's published check value is 0xCBF43926 for "123456789".
    assert default_method_id("123456789") == 0x0BF43926
    assert methods["tick"].method_id == default_method_id("tick") == 380606668
    assert default_method_id("é") == 235179326  # the name's UTF-8 bytes
    assert methods["ask"].method_id == 8
    assert not methods["ask"].may_suspend  # no await in its body: no snapshot needed


def test_subclasses_inherit_and_may_override_published_methods() -> None:
    class Base(Immortal):
        @fork
        def a(self) -> None: ...

    class Child(Base):
        @fork
        def b(self) -> None: ...

    class Override(Base):
        @impulse
        def a(self, n: int) -> None: ...

    class Unpublish(Base):
        def a(self) -> None: ...

    assert set(Child.__ambrosia_methods__) == {"a", "b"}
    assert Child.__ambrosia_methods__["a"] is Base.__ambrosia_methods__["a"]
    over = Override.__ambrosia_methods__["a"]
    assert over.func is vars(Override)["a"] and over.kind is MethodKind.IMPULSE
    assert list(over.signature.parameters) == ["self", "n"]
    assert Base.__ambrosia_methods__["a"].kind is MethodKind.FORK  # the base is untouched
    # Overridden without a decorator: no longer published.
    assert Unpublish.__ambrosia_methods__ == {}


def test_serializable_types() -> None:
    assert check_serializable(dict[str, list[tuple[int, ...]]]) is None
    assert check_serializable(int | None) is None
    assert "cannot be serialized" in (check_serializable(socket.socket) or "")


class Reading(NamedTuple):
    sensor: str
    at: int
    value: bytes


class Wired(NamedTuple):
    sensor: str
    line: socket.socket


def test_a_named_tuple_travels_as_the_array_of_its_fields() -> None:
    """Named records (an Impulse's batch items) are arrays on the wire, loaded back as
    the record: the same bytes as the plain tuple of the same values."""
    assert check_serializable(list[Reading]) is None
    assert check_serializable(Wired) == (
        "Wired.line: socket cannot be serialized (use a primitive, a container, an enum, "
        "a NamedTuple, an attrs class or a dataclass)")
    ser = Serializer()
    batch = [Reading("a", 1, b"x"), Reading("b", 2, b"")]
    packed = msgpack.packb(ser.dump(batch), use_bin_type=True)
    assert packed == msgpack.packb([["a", 1, b"x"], ["b", 2, b""]], use_bin_type=True)
    loaded = ser.load(msgpack.unpackb(packed), list[Reading])
    assert loaded == batch and all(type(r) is Reading for r in loaded)
    with pytest.raises(SerializationError, match="Reading has 3 fields, not 2"):
        ser.load([["a", 1]], list[Reading])


def test_public_api_is_pinned() -> None:
    assert sorted(ambrosia_py.__all__) == sorted([
        "Immortal", "rpc", "fork", "impulse", "gather", "ImmortalContext", "ImmortalProxy",
        "JsProxy", "PendingCall", "MethodKind", "default_method_id", "AmbrosiaError",
        "ImmortalDefinitionError", "ImpulseDuringRecoveryError", "RemoteCallError",
        "ReplayDivergenceError", "SerializationError", "UnknownMethodError", "UpgradeError",
        "__version__",
        "StopReason",
    ])
    for name in ambrosia_py.__all__:
        assert hasattr(ambrosia_py, name)
