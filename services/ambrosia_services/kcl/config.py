"""Record processors' configuration: the ``kcl`` table of ``ctx.config``, one entry per
stream name, checked with one-line errors.

```toml
[kcl.orders]
command = ["python", "my_processor.py"]   # or one string, split as a shell would
env = { PYTHONPATH = "/opt/kclpy" }         # added to the instance's environment
cwd = "/srv/orders"                         # "" = the instance's working directory
protocol = "current"                        # or "shutdown": amazon-kclpy 1.x's
```
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

import attrs

from ambrosia_core.errors import UsageError

from .protocol import Protocol

__all__ = ["ProcessorConfig", "ProcessorConfigError", "processors_from_config"]

_KEYS = ("command", "env", "cwd", "protocol", "batch_records", "timeout_seconds",
         "restart_max_seconds", "shutdown_seconds")


class ProcessorConfigError(UsageError):
    """A record processor's configuration holds an unknown key or a bad value."""


def _command(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = shlex.split(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()  # refused by the validator, which names the stream


@attrs.frozen
class ProcessorConfig:
    """One stream's record processor.

    Attributes:
        stream: the stream's name (the child is told it as its shard id).
        command: the program and its arguments.
        env: variables added to the instance's environment for the child.
        cwd: the child's working directory ("" = the instance's).
        protocol: the protocol version the child speaks.
        batch_records: the most records in one processRecords.
        timeout_seconds: a child that does not answer an action (or write a line) for this
            long is killed and started again.
        restart_max_seconds: the longest pause before starting a failed child again (the
            pause doubles from 0.1 s after each failure, until a child stays up).
        shutdown_seconds: how long a child may take to answer shutdownRequested when the
            instance stops, before it is killed.
    """

    stream: str
    command: tuple[str, ...]
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str = ""
    protocol: Protocol = Protocol.CURRENT
    batch_records: int = 500
    timeout_seconds: float = 60.0
    restart_max_seconds: float = 5.0
    shutdown_seconds: float = 5.0

    @classmethod
    def from_mapping(cls, stream: str, table: Any) -> ProcessorConfig:
        """Raises:
            ProcessorConfigError: an unknown key or a bad value (one line naming it).
        """
        where = f"kcl.{stream}"
        if not isinstance(table, Mapping):
            raise ProcessorConfigError(f"{where} must be a table with a command, got "
                                       f"{table!r}")
        unknown = sorted(set(table) - set(_KEYS))
        if unknown:
            raise ProcessorConfigError(f"{where}: unknown key(s) {', '.join(unknown)} "
                                       f"(known: {', '.join(_KEYS)})")
        command = _command(table.get("command"))
        if not command:
            raise ProcessorConfigError(f"{where}.command must be a non-empty list of "
                                       f"strings (or one string), got "
                                       f"{table.get('command')!r}")
        env = table.get("env", {})
        if not isinstance(env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ProcessorConfigError(f"{where}.env must be a table of strings, got {env!r}")
        cwd = table.get("cwd", "")
        if not isinstance(cwd, str):
            raise ProcessorConfigError(f"{where}.cwd must be a string, got {cwd!r}")
        try:
            protocol = Protocol(table.get("protocol", "current"))
        except ValueError:
            raise ProcessorConfigError(f"{where}.protocol must be \"current\" or "
                                       f"\"shutdown\", got {table.get('protocol')!r}"
                                       ) from None
        numbers: dict[str, Any] = {}
        for key in ("batch_records", "timeout_seconds", "restart_max_seconds",
                    "shutdown_seconds"):
            if key not in table:
                continue
            value = table[key]
            if key == "batch_records":
                if type(value) is not int or value < 1:
                    raise ProcessorConfigError(f"{where}.{key} must be an integer >= 1, got "
                                               f"{value!r}")
            elif type(value) not in (int, float) or not value > 0:
                raise ProcessorConfigError(f"{where}.{key} must be a number of seconds > 0, "
                                           f"got {value!r}")
            numbers[key] = value
        return cls(stream, command, dict(env), cwd, protocol, **numbers)


def processors_from_config(config: Mapping[str, Any]) -> list[ProcessorConfig]:
    """The processors of ``ctx.config``'s ``kcl`` table (none when it has no such key).

    Raises:
        ProcessorConfigError: ``kcl`` is not a table, or one of its entries is bad.
    """
    table = config.get("kcl", {})
    if not isinstance(table, Mapping):
        raise ProcessorConfigError(f"kcl must be a table of stream name = processor, got "
                                   f"{table!r}")
    return [ProcessorConfig.from_mapping(name, entry) for name, entry in sorted(table.items())]
