"""Ports in use: no two instances (or replicas) on one machine may be registered with
one port.

A registry can hold replicas on several machines (a registration taken from a Raft
cluster lists them all), and the same ports on two machines do not collide. The machine
of a replica is known by its advertised host: replicas advertising different hosts are
taken to run on different machines (two addresses of one machine with the same port
would still fail at ``ambrosia ic``, in one line, before anything is written)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ambrosia_core.ports import free_ports
from ambrosia_ic.errors import RegistryError

from .home import ambrosia_home
from .hosts import LOOPBACK
from .instances import find_instances, load
from .replicas import replicas

__all__ = ["free_ports", "refuse_taken_ports", "registered_ports", "unregistered_free_ports"]


def registered_ports(home: str | os.PathLike[str] | None = None
                     ) -> dict[int, tuple[str, int, str]]:
    """Every port the registry hands out: port -> (instance, replica number, which port),
    on any machine.

    Raises:
        RegistryError: a registration or replica file is damaged.
    """
    taken: dict[int, tuple[str, int, str]] = {}
    for (_, port), owner in _registered(ambrosia_home(home)).items():
        taken.setdefault(port, owner)
    return taken


def _registered(home_path: Path) -> dict[tuple[str, int], tuple[str, int, str]]:
    """(advertised host, port) -> (instance, replica number, which port)."""
    taken: dict[tuple[str, int], tuple[str, int, str]] = {}
    for name in find_instances(home_path):
        for rep in replicas(load(name, home_path), home_path):
            for which, port in (("receive port", rep.receive_port),
                                ("send port", rep.send_port), ("ic port", rep.ic_port)):
                taken.setdefault((rep.advertise_host, port), (name, rep.number, which))
    return taken


def refuse_taken_ports(home: Path, me: tuple[str, int], ports: Mapping[str, int],
                       machine: str) -> None:
    """Two coordinators cannot listen on one port: refuse a port that another instance (or
    another replica) on the same machine (advertised host) is registered with. ``me``
    (instance, replica) may keep its own."""
    taken = _registered(home)
    for mine, port in ports.items():
        owner = taken.get((machine, port))
        if owner is None or owner[:2] == me:
            continue
        name, number, which = owner
        whose = f"instance {name!r}" if number == 0 else f"replica {number} of {name!r}"
        where = "" if machine == LOOPBACK else f" on {machine}"
        raise RegistryError(
            f"{mine} {port} is already registered to {whose} (its {which}){where}; every "
            "instance and replica needs ports of its own"
        )


def unregistered_free_ports(n: int, home: str | os.PathLike[str] | None = None) -> list[int]:
    """``n`` distinct TCP ports that are free on 127.0.0.1 now and that no registration in
    ``home`` holds (a stopped instance's ports are free, yet still its own)."""
    taken = registered_ports(home)
    while True:
        ports = free_ports(n)
        if taken.keys().isdisjoint(ports):
            return ports
