"""Reading registrations, and recording a finished upgrade."""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs

from ambrosia_py.errors import RegistryError

from .home import ambrosia_home, write_durably
from .registration import Registration, check_instance_name

__all__ = ["find_instances", "instance_dir", "instances_dir", "load", "registration_exists",
           "set_versions"]


def instances_dir(home: Path) -> Path:
    return home / "instances"


def load(name: str, home: str | os.PathLike[str] | None = None) -> Registration:
    """The registration of ``name``.

    Raises:
        RegistryError: not registered, or the file is damaged.
    """
    check_instance_name(name)
    home_path = ambrosia_home(home)
    path = instances_dir(home_path) / f"{name}.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RegistryError(
            f"instance {name!r} is not registered in {home_path} "
            "(run `ambrosia register-instance` first)"
        ) from None
    except OSError as err:
        raise RegistryError(f"cannot read registration {path}: {err}") from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise RegistryError(f"{path}: not valid JSON: {err}") from None
    reg = Registration.from_json(data, str(path))
    if reg.instance_name != name:
        raise RegistryError(f"{path}: registers {reg.instance_name!r}, not {name!r}")
    return reg


def registration_exists(name: str, home: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``name`` has a registration file (readable or not)."""
    return (instances_dir(ambrosia_home(home)) / f"{check_instance_name(name)}.json").exists()


def set_versions(name: str, current: int, upgrade: int,
                 home: str | os.PathLike[str] | None = None) -> Registration:
    """Record that ``name`` now runs version ``current`` (a finished live upgrade).

    Raises:
        RegistryError: not registered, or the versions are invalid.
    """
    home_path = ambrosia_home(home)
    reg = attrs.evolve(load(name, home_path), current_version=current,
                       upgrade_version=upgrade).validate()
    path = instances_dir(home_path) / f"{name}.json"
    write_durably(path, (json.dumps(reg.to_json(), indent=2) + "\n").encode("utf-8"))
    return reg


def find_instances(home: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of all registered instances, sorted."""
    d = instances_dir(ambrosia_home(home))
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.json") if not p.name.startswith("."))


def instance_dir(reg: Registration, version: int | None = None) -> Path:
    """``<log-dir>/<instance>_<version>``, the real coordinator's layout."""
    v = reg.current_version if version is None else version
    return Path(reg.log_dir) / f"{reg.instance_name}_{v}"
