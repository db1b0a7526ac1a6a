"""Checking an immortal class as it is defined: its published methods (each checked by
``methods.validate_method``), their ids, its lifecycle hooks, how it checkpoints, and
that the runtime can create it. Every problem is collected before one
``ImmortalDefinitionError`` lists them all (``Immortal.__init_subclass__`` asks)."""

from __future__ import annotations

import inspect
from typing import Any

from ambrosia_py.errors import ImmortalDefinitionError

from .methods import METHOD_MARK, MethodMark, MethodSpec, StateForm, validate_method

__all__ = ["check_definition"]

_HOOKS = (
    "on_first_start",
    "on_checkpoint_loaded",
    "on_recovery_complete",
    "on_become_primary",
    "on_upgrade",
)


def check_definition(cls: type[Any], base: type[Any]
                     ) -> tuple[dict[str, MethodSpec], dict[int, MethodSpec], StateForm]:
    """The published methods of ``cls`` (a subclass of ``base``, whose checkpoint methods
    are the defaults), by name and by id, and how it checkpoints its state.

    Raises:
        ImmortalDefinitionError: every problem the class has, in one error.
    """
    problems: list[str] = []
    methods: dict[str, MethodSpec] = {}
    # Inherited methods first, so a subclass may override them.
    for parent in reversed(cls.__mro__[1:]):
        methods.update(getattr(parent, "__ambrosia_methods__", {}))
    for name, attr in list(vars(cls).items()):
        mark = getattr(attr, METHOD_MARK, None)
        if not isinstance(mark, MethodMark):
            inner = getattr(attr, "__func__", None)
            if isinstance(getattr(inner, METHOD_MARK, None), MethodMark):
                problems.append(f"{name}: published methods must be plain instance methods, "
                                f"not {type(attr).__name__}")
            elif name in methods and callable(attr):
                methods.pop(name)  # overridden without a decorator: no longer published
            continue
        spec, more = validate_method(cls, name, attr, mark)
        problems.extend(more)
        if spec is not None:
            methods[name] = spec
    by_id: dict[int, MethodSpec] = {}
    for spec in methods.values():
        other = by_id.get(spec.method_id)
        if other is not None:
            problems.append(f"{spec.name}: method id {spec.method_id} clashes with "
                            f"{other.name}")
        else:
            by_id[spec.method_id] = spec
    for hook in _HOOKS:
        if hook in methods:
            problems.append(f"{hook}: lifecycle hooks cannot be published methods")
    has_cs = cls.checkpoint_state is not base.checkpoint_state
    has_ls = cls.load_state is not base.load_state
    if has_cs != has_ls:
        problems.append("checkpoint_state and load_state must be overridden together")
    has_cp = cls.checkpoint_producer is not base.checkpoint_producer
    has_cc = cls.checkpoint_consumer is not base.checkpoint_consumer
    if has_cp != has_cc:
        problems.append("checkpoint_producer and checkpoint_consumer must be overridden "
                        "together")
    if (has_cs or has_ls) and (has_cp or has_cc):
        problems.append("a class checkpoints either with checkpoint_state/load_state or "
                        "with checkpoint_producer/checkpoint_consumer, not both")
    try:
        init_sig = inspect.signature(cls.__init__)
        required = [p.name for p in list(init_sig.parameters.values())[1:]
                    if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL,
                                                               p.VAR_KEYWORD)]
        if required:
            problems.append(f"__init__ must be callable with no arguments (the runtime "
                            f"creates the instance); it requires {', '.join(required)}")
    except (TypeError, ValueError):
        pass
    if problems:
        raise ImmortalDefinitionError(cls.__qualname__, problems)
    return methods, by_id, (StateForm.STREAM if has_cp else
                            StateForm.OBJECT if has_cs else StateForm.ATTRIBUTES)
