"""Active/active replicas: each one's ports, read from ``replicas/<name>/<N>.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from ambrosia_ic.errors import RegistryError

from .home import ambrosia_home
from .hosts import LOOPBACK, check_host, format_address, link_hosts
from .registration import Registration

__all__ = ["Replica", "link_lines", "replica", "replica_path", "replicas"]


@attrs.frozen
class Replica:
    """The ports of one active/active replica; ``upgrade_version`` > the instance's
    current version makes it the replica that performs a live upgrade. ``ic_host`` is
    where its link server listens, ``advertise_host`` what others dial (replica files
    written before these existed load as 127.0.0.1)."""

    number: int
    receive_port: int
    send_port: int
    ic_port: int
    upgrade_version: int = 0
    ic_host: str = LOOPBACK
    advertise_host: str = LOOPBACK

    @classmethod
    def from_json(cls, data: Any, where: str) -> Replica:
        """A replica as its file (or a published registration) holds it.

        Raises:
            RegistryError: not a replica's fields, of the wrong types, or bad hosts.
        """
        if not isinstance(data, dict):
            raise RegistryError(f"{where}: not a replica registration (expected a JSON object)")
        try:
            rep = cls(**data)
        except TypeError as err:
            raise RegistryError(f"{where}: {err}") from None
        for a in attrs.fields(cls):
            expected = str if a.name in ("ic_host", "advertise_host") else int
            if type(getattr(rep, a.name)) is not expected:
                raise RegistryError(f"{where}: field {a.name} should be {expected.__name__}")
        check_host(f"{where}: ic host", rep.ic_host)
        check_host(f"{where}: advertised host", rep.advertise_host)
        try:
            link_hosts(rep.ic_host, rep.advertise_host)
        except RegistryError as err:
            raise RegistryError(f"{where}: {err}") from None
        return rep


def replica_path(home: Path, name: str, n: int) -> Path:
    return home / "replicas" / name / f"{n}.json"


def replica(reg: Registration, n: int, home: str | os.PathLike[str] | None = None) -> Replica:
    """Replica ``n`` of ``reg`` (0 is the registration itself).

    Raises:
        RegistryError: not added, or its file is damaged.
    """
    if n == 0:
        return Replica(0, reg.receive_port, reg.send_port, reg.ic_port, reg.upgrade_version,
                       reg.ic_host, reg.advertise_host)
    path = replica_path(ambrosia_home(home), reg.instance_name, n)
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise RegistryError(
            f"replica {n} of {reg.instance_name!r} is not registered (run `ambrosia "
            f"add-replica --instance-name {reg.instance_name} --replica {n} ...`)"
        ) from None
    except (OSError, ValueError) as err:
        raise RegistryError(f"{path}: not a replica registration: {err}") from None
    return Replica.from_json(data, str(path))


def replicas(reg: Registration, home: str | os.PathLike[str] | None = None) -> list[Replica]:
    """Every replica of ``reg`` registered in ``home``, 0 (the registration) first.

    Raises:
        RegistryError: a replica file is damaged.
    """
    reps = [replica(reg, 0)]
    if reg.active_active:
        folder = ambrosia_home(home) / "replicas" / reg.instance_name
        numbers = sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())
        reps += [replica(reg, n, home) for n in numbers if n != 0]
    return reps


def link_lines(reg: Registration, home: str | os.PathLike[str] | None = None) -> list[str]:
    """Where each replica of ``reg`` takes links, one line each, for tools to show; none
    when every one is on 127.0.0.1 (the default, which they need not mention).

    Raises:
        RegistryError: a replica file is damaged.
    """
    reps = replicas(reg, home)
    if all(r.ic_host == r.advertise_host == LOOPBACK for r in reps):
        return []
    lines = []
    for r in reps:
        who = f"replica {r.number}: " if reg.active_active else ""
        listen = f" (listening on {r.ic_host})" if r.ic_host != r.advertise_host else ""
        lines.append(f"{who}links at {format_address(r.advertise_host, r.ic_port)}{listen}")
    return lines
