"""AmbrosiaJS's "post" conventions, as pure functions over the decoded JSON bodies.

A post call is a Fork to method -1 whose JSON carries ``senderInstanceName``,
``destinationInstanceName``, ``methodName``, ``methodVersion``, ``callID`` and one
``arg:<name>`` field per argument; its answer is a post named ``<name>_Result`` with the
same ``callID`` and either ``result`` or ``errorMsg``. Two details of AmbrosiaJS 2.0.1
need translating:

- **void results.** JSON has no ``undefined``, so AmbrosiaJS sends the string
  ``"__UNDEFINED__"`` as the ``result`` of a method that returned nothing, and turns it
  back into ``undefined`` on receipt. Python maps it to ``None`` on receipt, and sends it
  for a *void* Python method (declared ``-> None``, or with no return annotation) that
  returned ``None``, so a JS caller sees ``undefined`` exactly as from a JS callee. A
  ``None`` from a method declared to return something else (``int | None``, ``Any``) is
  a value, sent as JSON ``null``.
- **optional parameters.** AmbrosiaJS names an optional parameter ``arg:<name>?``; the
  parameter is ``<name>``, with or without the ``?`` (in a JSON fork's arguments, too).
"""

from __future__ import annotations

from typing import Any

from ambrosia_py.errors import SerializationError

from ..serialization import inspect_empty

__all__ = ["ARG_PREFIX", "UNDEFINED", "call_body", "fork_kwargs", "post_kwargs",
           "post_result", "result_body", "result_value"]

UNDEFINED = "__UNDEFINED__"  # AmbrosiaJS's stand-in for `undefined` in a post result
ARG_PREFIX = "arg:"
OPTIONAL_SUFFIX = "?"
_VOID_TYPES = (type(None), None, inspect_empty)


def call_body(sender: str, dest: str, method_name: str, call_id: int,
              args: dict[str, Any]) -> dict[str, Any]:
    """A post call's JSON body; ``args`` are already JSON-ready values."""
    body: dict[str, Any] = {
        "senderInstanceName": sender,
        "destinationInstanceName": dest,
        "methodName": method_name,
        "methodVersion": 1,
        "callID": call_id,
    }
    for k, v in args.items():
        body[ARG_PREFIX + k] = v
    return body


def post_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a post call: ``arg:n`` and ``arg:n?`` both name ``n``.

    Raises:
        SerializationError: one parameter is given twice (``arg:n`` and ``arg:n?``).
    """
    args = {k[len(ARG_PREFIX):]: v for k, v in body.items() if k.startswith(ARG_PREFIX)}
    return _optional_names(args, "the post call", ARG_PREFIX)


def fork_kwargs(obj: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a JSON fork or Impulse: ``n`` and ``n?`` both name ``n``.

    Raises:
        SerializationError: one parameter is given twice (``n`` and ``n?``).
    """
    return _optional_names(obj, "the JSON arguments", "")


def _optional_names(args: dict[str, Any], what: str, prefix: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for key, value in args.items():
        name = key[:-len(OPTIONAL_SUFFIX)] if key.endswith(OPTIONAL_SUFFIX) else key
        if name in kwargs:
            raise SerializationError(f"{what} gives argument {name!r} twice "
                                     f"({prefix}{name} and {prefix}{name}?)")
        kwargs[name] = value
    return kwargs


def post_result(body: dict[str, Any]) -> Any:
    """The value of a ``<name>_Result`` post: ``None`` for AmbrosiaJS's void placeholder."""
    value = body.get("result")
    return None if value == UNDEFINED else value


def result_value(value: Any, dumped: Any, return_type: Any) -> Any:
    """What to put in ``result`` for a method that returned ``value`` (``dumped`` is its
    JSON-ready form): the void placeholder for a void method's ``None``."""
    if value is None and return_type in _VOID_TYPES:
        return UNDEFINED
    return dumped


def result_body(sender: str, dest: str, method_name: str, call_id: Any) -> dict[str, Any]:
    """The head of a ``<name>_Result`` post; the caller adds ``result`` or ``errorMsg``."""
    return {
        "senderInstanceName": sender,
        "destinationInstanceName": dest,
        "methodName": f"{method_name}_Result",
        "methodVersion": 1,
        "callID": call_id,
    }
