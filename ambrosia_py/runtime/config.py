"""An immortal's configuration: ``--config FILE`` (TOML) and repeated ``--set KEY=VALUE``.

Immortals are built with no arguments, so this is how a deployment tells one where to
listen, what to connect to, how large a batch is. The result is a read-only mapping
(``ctx.config``): nested tables are read-only too, arrays are tuples.

Configuration is outside-world input: it may differ between a run and the replay of that
run. Code may read it freely to decide side effects (ports, addresses), but a handler
that changes state because of it must receive it as the argument of an Impulse, sent when
primary, so the log holds what the state was built from.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ambrosia_core.errors import UsageError

__all__ = ["EMPTY_CONFIG", "ConfigError", "freeze", "load_config", "parse_set"]

EMPTY_CONFIG: Mapping[str, Any] = MappingProxyType({})


class ConfigError(UsageError):
    """A configuration file or ``--set`` item cannot be read (one line says which, and why)."""


def freeze(value: Any) -> Any:
    """``value`` with every table read-only and every array a tuple."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def parse_set(item: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` -> (the dotted key's parts, the value).

    VALUE is read as a TOML value (``8``, ``true``, ``"x"``, ``[1, 2]``,
    ``{a = 1}``); anything that is not one is the string itself, so ``--set
    listen=127.0.0.1:0`` needs no quotes.

    Raises:
        ConfigError: no ``=``, or an empty key or key part.
    """
    key, sep, text = item.partition("=")
    key = key.strip()
    parts = [p.strip() for p in key.split(".")]
    if not sep or not key or not all(parts):
        raise ConfigError(f"--set {item!r} is not KEY=VALUE (KEY may be dotted: a.b=1)")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return parts, value


def load_config(path: str | Path | None = None, sets: Iterable[str] = ()) -> Mapping[str, Any]:
    """The file's tables with each ``--set`` applied over them, in order, read-only.

    Raises:
        ConfigError: the file cannot be read or is not TOML, or a ``--set`` item is
            malformed or goes through a key that holds a value rather than a table.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise ConfigError(f"cannot read the config file {str(path)!r}: "
                              f"{e.strerror or e}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"the config file {str(path)!r} is not TOML: {e}") from None
    for item in sets:
        parts, value = parse_set(item)
        table = data
        for i, part in enumerate(parts[:-1]):
            inner = table.setdefault(part, {})
            if not isinstance(inner, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:i + 1])} is a value, "
                                  "not a table")
            table = inner
        table[parts[-1]] = value
    return freeze(data)
