"""Job functions: ``@spark_job("name")`` marks one; a runner collects them from modules.

A job function takes the attempt's Spark session and the job's arguments and returns the
DataFrame that is the job's output. It does not write: the runner owns the write, so it
can put the output in the attempt's staging directory under the attempt's operation id
and commit it by rename. A function that wrote for itself could not be made exactly-once.

The decorator only marks and validates (no module-level registry: two runners in one
process see the modules they were given, nothing else); ``JobRegistry.from_modules``
imports the modules a runner was started with and collects every marked function,
reporting every problem at once.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs

from ..errors import JobDefinitionError, UnknownJobNameError

__all__ = ["JobDefinition", "JobRegistry", "definition_of", "spark_job"]

_MARK: Final = "__spark_job__"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,99}")

F = TypeVar("F", bound=Callable[..., Any])


@attrs.frozen
class JobDefinition:
    """A registered job: its name (what a ``start`` names) and its function, which takes
    ``(spark, records, args)`` when ``records`` (the batch's staged records as a
    DataFrame, read on the executors: ``staged.staged_records``), else ``(spark, args)``."""

    name: str
    function: Callable[..., Any]
    records: bool = False


def spark_job(name: str, *, records: bool = False) -> Callable[[F], F]:
    """Mark ``function(spark, args) -> DataFrame`` as the job called ``name``; with
    ``records``, ``function(spark, records, args)``, where ``records`` is a DataFrame of
    the batch's staged records (one string column, ``value``), read by Spark's executors
    from the segments the arguments name (``staging``, ``refs``).

    Raises:
        JobDefinitionError: the name is not 1-100 letters, digits, '_', '.', '-' starting
            with a letter, or the decorated object is not callable.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise JobDefinitionError(
            f"job name {name!r} is not 1-100 letters, digits, '_', '.' or '-' starting "
            "with a letter"
        )

    def mark(function: F) -> F:
        if not callable(function):
            raise JobDefinitionError(f"@spark_job({name!r}) needs a function, got {function!r}")
        setattr(function, _MARK, JobDefinition(name, function, records))
        return function

    return mark


def definition_of(obj: object) -> JobDefinition | None:
    found = getattr(obj, _MARK, None)
    return found if isinstance(found, JobDefinition) else None


class JobRegistry:
    """The job functions one runner can run, by name."""

    def __init__(self, definitions: Iterable[JobDefinition]) -> None:
        by_name: dict[str, JobDefinition] = {}
        problems = []
        for definition in definitions:
            if definition.name in by_name and by_name[definition.name] != definition:
                problems.append(f"job name {definition.name!r} is registered twice")
            by_name[definition.name] = definition
        if problems:
            raise JobDefinitionError(
                f"invalid job registry for {len(problems)} reason(s): " + "; ".join(problems)
            )
        self._by_name: Mapping[str, JobDefinition] = by_name

    @classmethod
    def from_modules(cls, module_names: Iterable[str]) -> JobRegistry:
        """Import each module and collect its ``@spark_job`` functions.

        Raises:
            JobDefinitionError: a module cannot be imported, holds no job, or two jobs
                share a name (every problem is named).
        """
        found: list[JobDefinition] = []
        problems = []
        for module_name in module_names:
            try:
                module = importlib.import_module(module_name)
            except ImportError as err:
                problems.append(f"cannot import {module_name}: {err}")
                continue
            here = [d for d in map(definition_of, vars(module).values()) if d is not None]
            if not here:
                problems.append(f"module {module_name} defines no @spark_job function")
            found.extend(here)
        if problems:
            raise JobDefinitionError(
                f"invalid job modules for {len(problems)} reason(s): " + "; ".join(problems)
            )
        return cls(found)

    def get(self, name: str) -> JobDefinition:
        """Raises: UnknownJobNameError: no module registered ``name``."""
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise UnknownJobNameError(f"no job named {name!r} (known: {known})") from None

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_name))
