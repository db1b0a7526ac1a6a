"""The Spark coordinator's configuration: the connector coordinator's keys plus the job
keys, split apart and checked with one-line errors.

| key | default | meaning |
|---|---|---|
| ``runners`` | ``[]`` | runners, ``"host:port"`` (named by the address) or ``"name@host:port"`` |
| ``out`` | ``""`` | the job output root the runners write under (needed with runners) |
| ``max_attempts`` | ``3`` | attempts of a job that may fail before ``on_job_failed`` |
| ``job_timeout_seconds`` | ``600`` | an attempt with no whole result this long fails (0: never) |
| ``batch_lines`` | ``2000`` | (word count) a micro-batch is cut once this many lines wait ... |
| ``batch_seconds`` | ``1.0`` | (word count) ... or once its first line is this old, at a tick |
| ``jobs_in_flight`` | ``1`` | (word count) batches whose jobs run at once; the next waits |
| ``max_batch_lines`` | ``2000000`` | (word count) the most lines a batch takes (Spark behind) |
| ``max_batch_bytes`` | ``268435456`` | (word count) ... and the most bytes |

A coordinator that stages what it receives (the word count) stages under ``<out>/staging``
unless ``staging`` names another root.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AddressError
from ambrosia_services.connectors.coordinator.config import (
    CoordinatorConfig,
    CoordinatorConfigError,
    at_least,
)
from ambrosia_services.jobs.attempts import member_id
from ambrosia_services.jobs.link import RunnerAddress

__all__ = ["JOB_KEYS", "PipelineConfig", "runner_address"]

JOB_KEYS = ("runners", "out", "max_attempts", "batch_lines", "batch_seconds",
            "job_timeout_seconds", "jobs_in_flight", "max_batch_lines", "max_batch_bytes")


def runner_address(text: str) -> RunnerAddress:
    """``"host:port"`` or ``"name@host:port"`` -> the runner's address and member id
    (``attempts.member_id`` of the name; the name is the address when none is given).

    Raises:
        CoordinatorConfigError: not one of those forms.
    """
    name, _, where = text.rpartition("@")
    try:
        address = Address.parse(where, what="runners")
    except AddressError as err:
        why = f" ({err.detail})" if err.detail else ""
        raise CoordinatorConfigError(f"runners must be \"host:port\" or \"name@host:port\", "
                                     f"got {text!r}{why}") from None
    return RunnerAddress(member_id(name or where), address.host, address.port)


def _runners(_i: Any, _a: Any, value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CoordinatorConfigError(f"runners must be a list of \"host:port\", got {value!r}")
    for text in value:
        runner_address(text)
    if len(set(value)) != len(value):
        raise CoordinatorConfigError(f"runners lists one runner twice: {value!r}")


def _seconds(_i: Any, _a: Any, value: Any) -> None:
    if type(value) not in (int, float) or not value > 0:
        raise CoordinatorConfigError(f"batch_seconds must be a number > 0, got {value!r}")


def _timeout(_i: Any, _a: Any, value: Any) -> None:
    if type(value) not in (int, float) or value < 0:
        raise CoordinatorConfigError(f"job_timeout_seconds must be a number >= 0 (0: no "
                                     f"timeout), got {value!r}")


def _text(_i: Any, _a: Any, value: Any) -> None:
    if type(value) is not str:
        raise CoordinatorConfigError(f"out must be a directory path, got {value!r}")


@attrs.frozen
class PipelineConfig:
    """The job keys (see the module docstring) and the coordinator's own configuration."""

    coordinator: CoordinatorConfig
    runners: list[str] = attrs.field(factory=list, validator=_runners)
    out: str = attrs.field(default="", validator=_text)
    max_attempts: int = attrs.field(default=3, validator=at_least("max_attempts", 1))
    batch_lines: int = attrs.field(default=2000, validator=at_least("batch_lines", 1))
    batch_seconds: float = attrs.field(default=1.0, validator=_seconds)
    job_timeout_seconds: float = attrs.field(default=600.0, validator=_timeout)
    jobs_in_flight: int = attrs.field(default=1, validator=at_least("jobs_in_flight", 1))
    max_batch_lines: int = attrs.field(default=2_000_000, validator=at_least("max_batch_lines", 1))
    max_batch_bytes: int = attrs.field(default=256 << 20, validator=at_least("max_batch_bytes", 1))

    def __attrs_post_init__(self) -> None:
        if self.runners and not self.out:
            raise CoordinatorConfigError("out (the job output root) is needed with runners")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any], *, stages: bool = False
                     ) -> PipelineConfig:
        """``stages``: the coordinator stages what it receives (``staging`` defaults to
        ``<out>/staging``, made absolute: runners on this host read it as it is).

        Raises: CoordinatorConfigError: an unknown key or a bad value (one line)."""
        mine = {k: v for k, v in config.items() if k in JOB_KEYS}
        if "runners" in mine and isinstance(mine["runners"], (list, tuple)):
            mine["runners"] = list(mine["runners"])
        rest = {k: v for k, v in config.items() if k not in JOB_KEYS}
        if stages and isinstance(rest.get("staging", mine.get("out")), str):
            staging = rest.get("staging") or (
                os.path.join(mine["out"], "staging") if mine.get("out") else "")
            if staging:
                rest["staging"] = os.path.abspath(staging)
        return cls(CoordinatorConfig.from_mapping(rest, JOB_KEYS), **mine)

    def addresses(self) -> list[RunnerAddress]:
        return [runner_address(r) for r in self.runners]

    def decision_part(self) -> dict[str, Any]:
        """What the job handlers decide with (reaches the state by an Impulse)."""
        return {"runners": list(self.runners), "max_attempts": self.max_attempts,
                "batch_lines": self.batch_lines, "batch_seconds": float(self.batch_seconds),
                "job_timeout_seconds": float(self.job_timeout_seconds),
                "jobs_in_flight": self.jobs_in_flight, "max_batch_lines": self.max_batch_lines,
                "max_batch_bytes": self.max_batch_bytes,
                "staging": self.coordinator.staging}
