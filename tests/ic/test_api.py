"""``ambrosia_ic.api``: the part of the coordinator the binding's test helpers use."""

from __future__ import annotations

import pytest
from ambrosia_ic import api
from ambrosia_ic.errors import RegistryError

from .conftest import Harness


def test_kept_checkpoints_per_version_and_the_current_version(harness: Harness) -> None:
    harness.register("x", current_version=3)
    for d, names in {"x_0": ["serverchkpt2", "serverchkpt1", "serverlog1"],
                     "x_3": ["serverchkpt5"], "x_4": ["serverlog9"],
                     "x_new": ["serverchkpt7"], "y_1": ["serverchkpt8"]}.items():
        (harness.logs / d).mkdir(parents=True)
        for name in names:
            (harness.logs / d / name).write_bytes(b"")
    assert api.kept_checkpoints_by_version("x", harness.home) == {0: [1, 2], 3: [5]}
    assert api.kept_checkpoints("x", harness.home) == [5]
    assert api.kept_checkpoints("x", harness.home, version=0) == [1, 2]
    assert api.kept_checkpoints("x", harness.home, version=4) == []
    assert api.current_version("x", harness.home) == 3


def test_an_unregistered_instance_is_a_registry_error(harness: Harness) -> None:
    with pytest.raises(RegistryError) as err:
        api.kept_checkpoints("nobody", harness.home)
    assert str(err.value) == (f"instance 'nobody' is not registered in {harness.home} (run "
                              "`ambrosia register-instance` first)")
