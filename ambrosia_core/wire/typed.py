"""Equality that sees the type, for the NamedTuples the wire and protocol layers return.

A NamedTuple compares as a plain tuple, so two different messages with the same fields
are equal: ``TakeCheckpoint() == BecomingPrimary()`` (both ``()``) and
``CheckpointLoaded(5) == CheckpointLoadStarted(5)``. A decoder that returned the wrong
type would then pass every test that compares against an expected value. The classes stay
tuples (cheap to build with ``tuple.__new__`` on the hot path, hashable, unpackable);
only ``==``, ``!=`` and ``hash`` change.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["typed_equality"]

T = TypeVar("T", bound=type)

_tuple_eq = tuple.__eq__
_tuple_hash = tuple.__hash__


def _eq(self: tuple[Any, ...], other: object) -> bool:
    # A plain tuple or another NamedTuple is never equal, even with the same fields.
    return type(other) is type(self) and _tuple_eq(self, other)


def _ne(self: tuple[Any, ...], other: object) -> bool:
    return not _eq(self, other)


def _hash(self: tuple[Any, ...]) -> int:
    return _tuple_hash(self) ^ hash(type(self).__qualname__)


def typed_equality(cls: T) -> T:
    """Class decorator: instances equal only instances of exactly the same class."""
    cls.__eq__ = _eq  # type: ignore[assignment]
    cls.__ne__ = _ne  # type: ignore[assignment]
    cls.__hash__ = _hash  # type: ignore[assignment]
    return cls
