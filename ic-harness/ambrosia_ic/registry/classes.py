"""Class records: per version, the ``MODULE:CLASS`` that ``ambrosia run`` ran."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ambrosia_ic.errors import RegistryError

from .home import ambrosia_home, write_durably
from .registration import check_instance_name

__all__ = ["record_class", "recorded_class"]


def _class_path(home: Path, name: str) -> Path:
    return home / "classes" / f"{name}.json"


def _read_classes(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise RegistryError(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise RegistryError(f"{path}: not a class record: {err}") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: not a class record (expected a JSON object)")
    return data


def record_class(name: str, version: int, target: str, directory: str | os.PathLike[str],
                 home: str | os.PathLike[str] | None = None) -> None:
    """Remember that version ``version`` of ``name`` runs ``target`` (``MODULE:CLASS``,
    imported from ``directory``), so that ``log dump`` can name its methods.

    Raises:
        RegistryError: the record is damaged, or cannot be read or written.
    """
    path = _class_path(ambrosia_home(home), check_instance_name(name))
    data = _read_classes(path)
    entry = {"class": target, "directory": os.path.abspath(os.fspath(directory))}
    if data.get(str(version)) != entry:
        data[str(version)] = entry
        try:
            write_durably(path, (json.dumps(data, indent=2, sort_keys=True) + "\n"
                                     ).encode())
        except OSError as err:
            raise RegistryError(f"cannot write {path}: {err.strerror or err}") from None


def recorded_class(name: str, version: int,
                   home: str | os.PathLike[str] | None = None) -> tuple[str, str] | None:
    """``(MODULE:CLASS, directory)`` recorded for version ``version`` of ``name``, or None.

    Raises:
        RegistryError: the record is damaged or cannot be read.
    """
    path = _class_path(ambrosia_home(home), check_instance_name(name))
    entry = _read_classes(path).get(str(version))
    if entry is None:
        return None
    if not (isinstance(entry, dict) and isinstance(entry.get("class"), str)
            and isinstance(entry.get("directory"), str)):
        raise RegistryError(f"{path}: version {version} is not a class record")
    return entry["class"], entry["directory"]
