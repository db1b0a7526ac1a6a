"""``log dump``: every checkpoint and record of an instance, readable or as JSON lines.

RPCs are shown by method id. What an id means belongs to the immortal class, which the
coordinator never imports: the ``ambrosia`` command passes ``describe`` and ``format_rpc``
(``ambrosia_cli.calls``) to add method names, senders and arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ambrosia_core.errors import CoordinatorError, RemoteProtocolError
from ambrosia_core.wire import Direction, MessageType, Rpc, decode_messages, message_type_of
from ambrosia_ic.errors import LogCorruptionError

from .logstore import (
    CHECKPOINT_PREFIX,
    DIGEST_PREFIX,
    LOG_PREFIX,
    CheckpointFile,
    LogScan,
    checkpoint_path,
    digest_path,
    file_numbers,
    log_path,
    read_digest,
)

__all__ = ["Describe", "FormatRpc", "dump_entries", "format_entry", "format_rpc_ids",
           "jsonable"]

#: What an RPC means to the class that ran the instance: keys added to its entry.
Describe = Callable[[Rpc], dict[str, Any]]
#: One RPC entry of a record as one piece of its line.
FormatRpc = Callable[[dict[str, Any]], str]


def _describe(body: bytes, describe: Describe | None = None) -> list[dict[str, Any]]:
    """The messages of a record body; with ``describe``, RPCs also say what they mean."""
    out: list[dict[str, Any]] = []
    for m in decode_messages(body, 0, len(body), Direction.TO_BINDING):
        size = len(m.encode())
        if type(m) is Rpc:
            if m.reserved:
                out.append({"type": "RPC", "reserved": m.reserved, "size": size})
            else:
                entry = {"type": "RPC", "method_id": m.method_id,
                         "rpc_type": ("async", "fork", "impulse")[m.rpc_type], "size": size}
                if describe is not None:
                    entry.update(describe(m))
                out.append(entry)
        else:
            out.append({"type": MessageType(message_type_of(m)).name, "size": size})
    return out


def dump_entries(d: Path, committer_id: int | None = None,
                 describe: Describe | None = None) -> Iterator[dict[str, Any]]:
    """One dict per checkpoint, record, digest and problem found in instance directory ``d``
    (with ``describe``, what each RPC means to the class that ran it)."""
    if not d.is_dir():
        yield {"kind": "problem", "file": str(d), "offset": 0, "reason": "no such directory"}
        return
    for n in file_numbers(d, CHECKPOINT_PREFIX):
        path = checkpoint_path(d, n)
        try:
            cf = CheckpointFile(path)  # verifies the check bytes of the whole file
        except LogCorruptionError as err:
            yield {"kind": "problem", "file": err.path, "offset": err.offset, "reason": err.reason}
            continue
        except CoordinatorError as err:  # the format before check bytes
            yield {"kind": "problem", "file": str(path), "offset": 0,
                   "reason": str(err).removeprefix(f"{path}: ")}
            continue
        s = cf.state
        outputs = s.get("outputs", {})
        yield {
            "kind": "checkpoint", "file": str(path), "number": n,
            "next_seq": s.get("next_seq"), "inputs": s.get("inputs"),
            "outputs": {k: {"next": v.get("next"), "unacked": len(v.get("unacked", []))}
                        for k, v in outputs.items()} if isinstance(outputs, dict) else None,
            "binding_bytes": cf.size,
        }
    logs = file_numbers(d, LOG_PREFIX)
    for i, n in enumerate(logs):
        path = log_path(d, n)
        scan = LogScan(path, allow_torn_tail=i == len(logs) - 1, committer_id=committer_id)
        try:
            for rec in scan:
                entry: dict[str, Any] = {
                    "kind": "record", "file": str(path), "offset": rec.offset,
                    "seq_id": rec.seq_id, "length": len(rec.wire), "inputs": rec.inputs,
                }
                try:
                    entry["messages"] = _describe(rec.body, describe)
                except RemoteProtocolError as err:
                    entry["messages"] = []
                    yield entry
                    yield {"kind": "problem", "file": str(path), "offset": rec.offset,
                           "reason": f"record {rec.seq_id} does not decode: {err}"}
                    continue
                yield entry
        except LogCorruptionError as err:
            yield {"kind": "problem", "file": err.path, "offset": err.offset, "reason": err.reason}
            continue
        if scan.torn_at is not None and not scan.zero_tail:  # zeros: not written yet
            yield {"kind": "problem", "file": str(path), "offset": scan.torn_at,
                   "reason": "torn final record (a crash during a write); the coordinator "
                             "cuts it off when it recovers"}
    for n in file_numbers(d, DIGEST_PREFIX):
        yield {"kind": "digest", "file": str(digest_path(d, n)), "number": n,
               "outputs": len(read_digest(digest_path(d, n)))}


def format_rpc_ids(m: dict[str, Any]) -> str:
    """An RPC as the log holds it: method id, kind and size."""
    return f"RPC method {m['method_id']} {m['rpc_type']} {m['size']}B"


def format_entry(e: dict[str, Any], as_json: bool,
                 format_rpc: FormatRpc = format_rpc_ids) -> str:
    if as_json:
        return json.dumps(jsonable(e), sort_keys=True)
    kind = e["kind"]
    if kind == "checkpoint":
        outs = ", ".join(f"{k}: next {v['next']}, {v['unacked']} unacked"
                         for k, v in (e["outputs"] or {}).items())
        return (f"checkpoint {e['number']} ({e['file']}): next seq {e['next_seq']}, "
                f"inputs {e['inputs']}, outputs [{outs}], {e['binding_bytes']} binding bytes")
    if kind == "record":
        msgs = "; ".join(
            (format_rpc(m) if "method_id" in m else f"{m['type']} {m['size']}B")
            for m in e["messages"]
        )
        return (f"  seq {e['seq_id']} @{e['offset']} len {e['length']}: {msgs}"
                + (f"  inputs {e['inputs']}" if e["inputs"] else ""))
    if kind == "digest":
        return f"digest {e['number']} ({e['file']}): {e['outputs']} outputs"
    return f"PROBLEM {e['file']} at offset {e['offset']}: {e['reason']}"


def jsonable(value: Any) -> Any:
    """``value`` with what JSON cannot hold made plain: bytes as ``{"hex": ...}``, map
    keys as strings, tuples and sets as lists."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else _key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"hex": bytes(value).hex()}
    return value


def _key(key: Any) -> str:
    return bytes(key).hex() if isinstance(key, (bytes, bytearray)) else str(key)
