"""Active/active replicas: each one's ports, read from ``replicas/<name>/<N>.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs

from ambrosia_py.errors import RegistryError

from .home import ambrosia_home
from .registration import Registration

__all__ = ["Replica", "replica", "replica_path"]


@attrs.frozen
class Replica:
    """The ports of one active/active replica; ``upgrade_version`` > the instance's
    current version makes it the replica that performs a live upgrade."""

    number: int
    receive_port: int
    send_port: int
    ic_port: int
    upgrade_version: int = 0


def replica_path(home: Path, name: str, n: int) -> Path:
    return home / "replicas" / name / f"{n}.json"


def replica(reg: Registration, n: int, home: str | os.PathLike[str] | None = None) -> Replica:
    """Replica ``n`` of ``reg`` (0 is the registration itself).

    Raises:
        RegistryError: not added, or its file is damaged.
    """
    if n == 0:
        return Replica(0, reg.receive_port, reg.send_port, reg.ic_port, reg.upgrade_version)
    path = replica_path(ambrosia_home(home), reg.instance_name, n)
    try:
        data = json.loads(path.read_bytes())
        rep = Replica(**data)
    except FileNotFoundError:
        raise RegistryError(
            f"replica {n} of {reg.instance_name!r} is not registered (run `ambrosia "
            f"add-replica --instance-name {reg.instance_name} --replica {n} ...`)"
        ) from None
    except (OSError, ValueError, TypeError) as err:
        raise RegistryError(f"{path}: not a replica registration: {err}") from None
    return rep
