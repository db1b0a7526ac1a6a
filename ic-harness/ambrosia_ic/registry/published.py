"""A registration as it is published in a Raft cluster (the instance with its replicas'
ports), and taking one from there into a local registry: a machine that runs a replica
needs no copy of the registry directory, only the cluster's address."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from ambrosia_ic.errors import RegistryError

from .home import ambrosia_home, write_durably
from .instances import instances_dir, registration_json
from .registration import Registration
from .replicas import Replica, replica_path

__all__ = ["adopt", "adopted", "adopted_marker", "published"]


def adopted_marker(home: str | os.PathLike[str] | None, name: str) -> Path:
    """The file that says ``name``'s registration here was taken from a cluster (a
    registration made here removes it: a local one wins, and is never replaced)."""
    return instances_dir(ambrosia_home(home)) / f"{name}.adopted"


def adopted(name: str, home: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``name``'s registration here was taken from a cluster."""
    return adopted_marker(home, name).exists()


def published(reg: Registration, home: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """``reg``'s JSON form with the ports of every replica added in ``home``."""
    d = ambrosia_home(home) / "replicas" / reg.instance_name
    replicas: dict[str, Any] = {}
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            replicas[path.stem] = json.loads(path.read_bytes())
        except (OSError, ValueError) as err:
            raise RegistryError(f"{path}: not a replica registration: {err}") from None
    return {**reg.to_json(), "replicas": replicas}


def adopt(doc: Any, home: str | os.PathLike[str] | None = None,
          where: str = "the cluster") -> Registration:
    """Store a published registration (``published``'s form) in ``home``'s registry.

    Raises:
        RegistryError: ``doc`` is not a valid registration or a replica in it is not.
    """
    if not isinstance(doc, dict):
        raise RegistryError(f"{where}: not a registration (expected a JSON object)")
    doc = dict(doc)
    raw_replicas = doc.pop("replicas", {})
    reg = Registration.from_json(doc, where)
    if not isinstance(raw_replicas, dict):
        raise RegistryError(f"{where}: replicas of {reg.instance_name} are not a JSON object")
    replicas: list[Replica] = []
    for key, value in raw_replicas.items():
        rep = Replica.from_json(value, f"{where}: replica {key!r} of {reg.instance_name}")
        if str(rep.number) != key or rep.number < 1:
            raise RegistryError(f"{where}: replica {key!r} of {reg.instance_name} says it is "
                                f"replica {rep.number}")
        replicas.append(rep)
    home_path = ambrosia_home(home)
    for rep in replicas:
        write_durably(replica_path(home_path, reg.instance_name, rep.number),
                      (json.dumps(attrs.asdict(rep)) + "\n").encode("utf-8"))
    write_durably(adopted_marker(home_path, reg.instance_name), where.encode("utf-8") + b"\n")
    write_durably(instances_dir(home_path) / f"{reg.instance_name}.json",
                  registration_json(reg, home_path))
    return reg
