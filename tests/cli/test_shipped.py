"""``ambrosia run NAME`` runs a shipped service by its short name."""

from __future__ import annotations

import pytest

from ambrosia_cli.run import SHIPPED, build_parser, shipped
from ambrosia_py.immortal import Immortal
from ambrosia_py.runtime.cli import load_class


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_short_name_is_an_immortal_class_of_the_services_package(name: str) -> None:
    target = shipped(name)
    assert target.startswith("ambrosia_services.")
    cls = load_class(target)
    assert issubclass(cls, Immortal)
    assert f"{cls.__module__.rsplit('.', 1)[0]}:{cls.__name__}".startswith(
        target.split(":")[0])


def test_other_targets_pass_unchanged_and_the_help_names_the_short_ones() -> None:
    assert shipped("samples.counter.counter:Counter") == "samples.counter.counter:Counter"
    assert SHIPPED == {
        "connectors": "ambrosia_services.connectors:ConnectorCoordinator",
        "kcl": "ambrosia_services.kcl:KclCoordinator",
        "spark": "ambrosia_services.pipeline:SparkCoordinator",
        "wordcount": "ambrosia_services.pipeline:WordCountPipeline",
    }
    assert "connectors, kcl, spark, wordcount" in " ".join(build_parser().format_help().split())
