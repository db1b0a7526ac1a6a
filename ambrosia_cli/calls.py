"""What a logged RPC means to an immortal class, for ``log dump --class``.

The log holds method ids and argument bytes. Given the class that ran the instance, this
names the method (the class's own id table, ``__ambrosia_by_id__``), the sender and the
arguments, decoded with the framework's own codecs (``ambrosia_py.serialization``): the
envelope of a Python caller, the JSON object or raw bytes of an AmbrosiaJS caller, the
JSON of an AmbrosiaJS "post", and the results of awaited calls. Nothing is executed.

The coordinator's dump (``ambrosia_ic.dump``) knows only ids; this module, which may import
the binding's programming model, is what ``log dump`` hands it to add the meaning.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ambrosia_ic.dump import format_rpc_ids

from ambrosia_core.wire import Rpc
from ambrosia_py import serialization as ser
from ambrosia_py.errors import SerializationError
from ambrosia_py.immortal import (
    POST_BY_IMPULSE_METHOD_ID,
    POST_METHOD_ID,
    RESULT_METHOD_ID,
    Immortal,
    MethodSpec,
)
from ambrosia_py.runtime.cli import load_class as runtime_load_class

__all__ = ["describe_call", "format_call", "load_class"]


def load_class(target: str, directory: str | None = None) -> type[Immortal]:
    """The Immortal subclass ``MODULE:CLASS``, imported as ``ambrosia run`` imports it
    (the current directory first), then from ``directory`` (where it was run from).

    Raises:
        AmbrosiaError: ``target`` is not MODULE:CLASS, cannot be imported, or is not an
            Immortal subclass (one line naming it).
    """
    if directory and directory not in sys.path and os.path.isdir(directory):
        sys.path.append(directory)
    return runtime_load_class(target)


def describe_call(cls: type[Immortal], rpc: Rpc) -> dict[str, Any]:
    """The fields ``log dump`` adds to an RPC message when it knows the class.

    Keys: ``method`` and ``kind`` (as the class publishes it), ``sender``, ``call_id``
    (an awaited call), ``args`` (parameter name -> value as logged); for the result of an
    awaited call ``result_of``, ``sender`` and ``value`` or ``error``; ``note`` when the
    class does not know the method or the arguments do not decode.
    """
    mid, args = rpc.method_id, rpc.args
    try:
        if mid == RESULT_METHOD_ID:
            return _result(args)
        if mid in (POST_METHOD_ID, POST_BY_IMPULSE_METHOD_ID):
            return _post(cls, args)
        spec = cls.__ambrosia_by_id__.get(mid)
        if spec is None:
            return {"note": f"{cls.__qualname__} publishes no method with id {mid}"}
        return _call(cls, spec, args)
    except SerializationError as err:
        return {"note": f"the arguments do not decode: {err}"}


def _call(cls: type[Immortal], spec: MethodSpec, args: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"method": spec.name, "kind": spec.kind.value}
    if ser.is_envelope(args):
        env = ser.Envelope.decode(args)
        out["sender"] = env.caller
        if env.call_id >= 0:
            out["call_id"] = env.call_id
        out["args"] = _named(spec, env.payload)
    elif args[:1] == b"{":  # AmbrosiaJS's JSON form: keyword arguments, no sender
        out["args"] = ser.decode_json_args(args)
    elif args[:1] == bytes([ser.RAW_BYTES_MARKER]):  # AmbrosiaJS's raw bytes: one argument
        params = _params(spec)
        out["args"] = {params[0] if params else "data": ser.decode_raw_args(args)}
    else:
        raise SerializationError(f"arguments of {spec.name} are in no known form")
    problem = _load_problem(cls, spec, out["args"])
    if problem:
        out["note"] = problem
    return out


def _params(spec: MethodSpec) -> list[str]:
    return list(spec.signature.parameters)[1:]  # without self


def _named(spec: MethodSpec, payload: Any) -> dict[str, Any]:
    """``[args, kwargs]`` as the parameter names they bind to."""
    if not (isinstance(payload, list) and len(payload) == 2
            and isinstance(payload[0], list) and isinstance(payload[1], dict)):
        raise SerializationError(f"arguments of {spec.name} are not [args, kwargs]")
    positional, named = payload
    params = _params(spec)
    out = {(params[i] if i < len(params) else f"#{i}"): v for i, v in enumerate(positional)}
    out.update(named)
    return out


def _load_problem(cls: type[Immortal], spec: MethodSpec, args: dict[str, Any]) -> str | None:
    """Why the arguments would not load as the parameters' annotated types (as the
    handler would receive them), or None."""
    serializer = cls.__ambrosia_serializer__
    for name, value in args.items():
        try:
            serializer.load(value, spec.param_type(name))
        except SerializationError as err:
            return f"argument {name!r} does not load: {err}"
    try:
        spec.signature.bind(None, **{k: v for k, v in args.items() if not k.startswith("#")})
    except TypeError as err:
        return f"the arguments do not fit {spec.name}: {err}"
    if any(k.startswith("#") for k in args):
        return f"more positional arguments than {spec.name} takes"
    return None


def _result(args: bytes) -> dict[str, Any]:
    env = ser.Envelope.decode(args)
    out: dict[str, Any] = {"result_of": env.call_id, "sender": env.caller}
    payload = env.payload
    if not (isinstance(payload, list) and len(payload) == 2):
        raise SerializationError("a result is not [ok, value]")
    ok, value = payload
    if ok:
        out["value"] = value
    else:
        out["error"] = ": ".join(str(v) for v in value) if isinstance(value, list) else value
    return out


def _post(cls: type[Immortal], args: bytes) -> dict[str, Any]:
    """An AmbrosiaJS "post": a call by name, or the result of one."""
    obj = ser.decode_json_args(args)
    name = obj.get("methodName")
    sender = obj.get("senderInstanceName")
    call_id = obj.get("callID")
    spec = cls.__ambrosia_methods__.get(name) if isinstance(name, str) else None
    if spec is None and isinstance(name, str) and name.endswith("_Result"):
        out: dict[str, Any] = {"result_of": call_id, "sender": sender,
                               "post_method": name[: -len("_Result")]}
        if "errorMsg" in obj:
            out["error"] = obj["errorMsg"]
        else:
            out["value"] = obj.get("result")
        return out
    out = {"method": name, "kind": "post", "sender": sender, "call_id": call_id,
           "args": {k[4:]: v for k, v in obj.items() if k.startswith("arg:")}}
    if spec is None:
        out["note"] = f"{cls.__qualname__} publishes no method {name!r}"
    else:
        problem = _load_problem(cls, spec, out["args"])
        if problem:
            out["note"] = problem
    return out


def format_call(m: dict[str, Any]) -> str:
    """One message of a record as ``log dump`` prints it, given ``describe_call``'s keys."""
    size = f"{m['size']}B"
    if "result_of" in m:
        what = "post result" if "post_method" in m else "result"
        outcome = (f"raised {m['error']}" if "error" in m else _repr(m.get("value")))
        return f"{what} of call {m['result_of']} from {m['sender']}: {outcome} {size}"
    if "method" in m:
        args = ", ".join(f"{k}={_repr(v)}" for k, v in m["args"].items())
        how = m["kind"] if m.get("rpc_type") != "impulse" else "impulse"
        if m.get("call_id") is not None and m["kind"] in ("rpc", "post"):
            how += f" call {m['call_id']}"
        sender = f" from {m['sender']}" if m.get("sender") else ""
        text = f"{m['method']}({args}) {how}{sender} {size}"
    else:
        text = format_rpc_ids(m)
    return f"{text} ({m['note']})" if "note" in m else text


def _repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."
