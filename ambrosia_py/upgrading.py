"""How a live upgrade carries an immortal's state from VCurrent to VNext.

A class converts with ``upgrade_from(previous)``. When it defines none, the conversion is
the identity on the previous version's checkpointed state, and that is only allowed when
the two classes keep their state the same way: the same form (attributes,
``checkpoint_state``/``load_state``, or a producer/consumer stream), the same functions
for it, and for attribute state the same attributes. Anything else is refused with
``UpgradeError`` naming the difference, never converted by dropping what it does not know.

A conversion inherited from a base class converted that base's own previous version, and
was written for that base's state: it is used only when the identity does not apply and
the class keeps its state exactly as that base does; a subclass that adds a job table to
a service base class with ``upgrade_from`` never gets an instance from it that silently
lacks the table.

Nothing here touches a socket or the runtime; ``Immortal`` calls it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from ambrosia_py.errors import UpgradeError

from .methods import StateForm

__all__ = ["conversion_problem", "default_conversion", "is_default", "keep_state", "mark_default",
           "state_difference"]

_CHUNK_MAX = 1 << 20  # a consumer sees chunks of at most 1 MiB, as from a checkpoint
_FORM_WORDS = {
    StateForm.ATTRIBUTES: "checkpoints its attributes",
    StateForm.OBJECT: "checkpoints with checkpoint_state/load_state",
    StateForm.STREAM: "checkpoints with checkpoint_producer/checkpoint_consumer",
}
_FORM_METHODS = {
    StateForm.OBJECT: ("checkpoint_state", "load_state"),
    StateForm.STREAM: ("checkpoint_producer", "checkpoint_consumer"),
}


def _func(cls: type, name: str) -> Any:
    return getattr(cls, name, None)


def _owner(cls: type, name: str) -> str:
    for klass in cls.__mro__:
        if name in vars(klass):
            return f"{klass.__qualname__}.{name}"
    return name  # pragma: no cover - every class here has the method


def state_difference(old: type, new: type, previous: Any = None) -> str | None:
    """How ``new`` keeps its state differently from ``old``, or None when a checkpoint of
    one is a checkpoint of the other.

    Args:
        previous: an instance of ``old``; with it, attribute state is compared by the
            attributes it holds against those of a fresh ``new``, not only by ``__init__``.
    """
    old_form = old.__ambrosia_state_form__  # type: ignore[attr-defined]
    new_form = new.__ambrosia_state_form__  # type: ignore[attr-defined]
    if old_form is not new_form:
        return (f"{old.__qualname__} {_FORM_WORDS[old_form]}, "
                f"{new.__qualname__} {_FORM_WORDS[new_form]}")
    if new_form in _FORM_METHODS:
        names = _FORM_METHODS[new_form]
        if all(_func(old, n) is _func(new, n) for n in names):
            return None
        return (f"{new.__qualname__} checkpoints with "
                f"{' and '.join(_owner(new, n) for n in names)}, {old.__qualname__} with "
                f"{' and '.join(_owner(old, n) for n in names)}")
    if attrs.has(old) or attrs.has(new):
        return _fields_difference(old, new)
    old_types = old.__ambrosia_state_types__  # type: ignore[attr-defined]
    new_types = new.__ambrosia_state_types__  # type: ignore[attr-defined]
    if _func(old, "__init__") is _func(new, "__init__") and old_types == new_types:
        return None
    if previous is None:
        return (f"{new.__qualname__} sets up its attributes in {_owner(new, '__init__')}, "
                f"{old.__qualname__} in {_owner(old, '__init__')}")
    had = {k for k in vars(previous) if not k.startswith("_")}
    has = {k for k in vars(new()) if not k.startswith("_")}
    if had != has:
        return _names_difference(old, new, had, has)
    typed = [n for n in sorted(has) if old_types.get(n, Any) != new_types.get(n, Any)]
    if typed:
        return f"the declared types of {', '.join(typed)} differ"
    return None


def _fields_difference(old: type, new: type) -> str | None:
    if not (attrs.has(old) and attrs.has(new)):
        plain = new if attrs.has(old) else old
        return f"{plain.__qualname__} is not an attrs class and the other is"
    was = {f.name: f.type for f in attrs.fields(old)}
    now = {f.name: f.type for f in attrs.fields(new)}
    if set(was) != set(now):
        return _names_difference(old, new, set(was), set(now))
    typed = [n for n in now if was[n] != now[n]]
    if typed:
        return f"the types of {', '.join(typed)} differ"
    return None


def _names_difference(old: type, new: type, had: set[str], has: set[str]) -> str:
    parts = []
    if has - had:
        parts.append(f"{new.__qualname__} adds {', '.join(sorted(has - had))}")
    if had - has:
        parts.append(f"{new.__qualname__} drops {', '.join(sorted(had - has))}")
    return "; ".join(parts)


def keep_state(cls: type, previous: Any) -> Any:
    """A new instance of ``cls`` holding ``previous``'s state as its checkpoint has it:
    ``load_state(checkpoint_state())``, the producer's chunks into the consumer (at most
    1 MiB each), or the attributes. The caller has checked that the forms agree."""
    new = cls()
    form = cls.__ambrosia_state_form__  # type: ignore[attr-defined]
    if form is StateForm.OBJECT:
        new.load_state(previous.checkpoint_state())
    elif form is StateForm.STREAM:
        rest = _rechunk(previous.checkpoint_producer())
        new.checkpoint_consumer(rest)
        for _ in rest:  # what a consumer leaves unread is drained, as from a checkpoint
            pass
    else:
        names = ([f.name for f in attrs.fields(type(previous))] if attrs.has(type(previous))
                 else [k for k in vars(previous) if not k.startswith("_")])
        for name in names:
            object.__setattr__(new, name, getattr(previous, name))
    return new


def _rechunk(chunks: Any) -> Iterator[bytes]:
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        for i in range(0, len(view), _CHUNK_MAX):
            yield bytes(view[i:i + _CHUNK_MAX])


def mark_default(func: Any) -> Any:
    """Marks ``Immortal``'s own ``upgrade_from``: a class whose ``upgrade_from`` is this
    one says nothing of its own about converting."""
    func.__ambrosia_default_conversion__ = True
    return func


def is_default(cls: type) -> bool:
    method = vars(cls).get("upgrade_from")
    return getattr(getattr(method, "__func__", None), "__ambrosia_default_conversion__", False)


def _custom_owner(cls: type) -> type | None:
    """The nearest class in ``cls``'s MRO whose own ``upgrade_from`` is not the default."""
    for klass in cls.__mro__:
        if "upgrade_from" in vars(klass) and not is_default(klass):
            return klass
    return None


def conversion_problem(cls: type, previous_cls: type, previous: Any = None) -> str | None:
    """Why ``cls`` (which says nothing of its own about converting) cannot take the state
    of ``previous_cls``, or None; ``previous``, an instance of it, makes attribute state
    compared by what it holds."""
    why = state_difference(previous_cls, cls, previous)
    if why is None:
        return None
    owner = _custom_owner(cls)
    if owner is not None and state_difference(owner, cls) is None:
        return None  # a base's conversion, written for this very state
    if owner is not None:
        why += (f" ({owner.__qualname__}.upgrade_from is not used: it was written for "
                f"{owner.__qualname__}'s state, which {cls.__qualname__} changes)")
    return why


def default_conversion(cls: type, previous: Any) -> Any:
    """The conversion of a class with no ``upgrade_from`` of its own: the identity when the
    state is the same; else a base's ``upgrade_from`` written for the same state as this
    class's; else ``UpgradeError``. An inherited conversion converted the base's own
    previous version, so the identity comes first whenever it applies."""
    if state_difference(type(previous), cls, previous) is None:
        return keep_state(cls, previous)
    why = conversion_problem(cls, type(previous), previous)
    if why is None:
        owner = _custom_owner(cls)
        assert owner is not None
        return vars(owner)["upgrade_from"].__func__(cls, previous)
    raise UpgradeError(
        f"{cls.__qualname__} version {cls.version} cannot take the state of "  # type: ignore[attr-defined]
        f"{type(previous).__qualname__} version {type(previous).version} as it is: "
        f"{why}; define {cls.__qualname__}.upgrade_from(previous) to say how "
        f"(return cls.keep_state(previous) if the state is in fact the same)")
