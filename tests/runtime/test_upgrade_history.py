"""Upgrade tests of an instance that was already upgraded live: `upgrade_test` replays the
version before the upgrade converted to VNext, then the upgraded version's files."""

from __future__ import annotations

import shutil

import pytest

from ambrosia_core.wire import RpcType
from ambrosia_py.errors import AlreadyUpgradedError
from ambrosia_py.testing import checkpoints, upgrade_test
from tests.launcher import Launcher, wait_until

from .apps import BookV1, BookV2

pytestmark = pytest.mark.integration

V1, V2 = "tests.runtime.apps:BookV1", "tests.runtime.apps:BookV2"
FINAL = {"Ada": 2, "Grace": 1, "Linus": 1}


def _upgrade_live(launcher: Launcher) -> None:
    """v1 signs three names as version 1 (its class's ``version``), then ``ambrosia run
    --upgrade-to`` registers and performs the live upgrade to version 2, where v2 takes one
    more signature from the outside world."""
    from ambrosia_ic import registry

    p = launcher.start(V1, "book")
    p.wait_for("(3 signatures)")
    p.stop()
    assert registry.load("book", launcher.home).current_version == 1
    p = launcher.start(V1, "book", args=["--upgrade-to", V2])
    assert "(live)" in p.wait_for("upgraded to BookV2 version 2")
    p.wait_for("v2 signed by Linus (4 signatures)")
    wait_until(lambda: registry.load("book", launcher.home).current_version == 2,
               "version 2 registered")
    p.stop()


def test_upgrade_test_after_a_live_upgrade_replays_both_versions(launcher: Launcher) -> None:
    _upgrade_live(launcher)
    old, new = checkpoints("book", launcher.home, 1), checkpoints("book", launcher.home, 2)
    assert len(old) == 1 and len(new) == 1 and new[0] > old[0]
    result = upgrade_test("book", BookV1, BookV2, home=launcher.home)
    assert isinstance(result.state, BookV2)
    assert result.state.counts == FINAL
    assert result.status == "ok"
    # Version 1: the InitialMessage, the batch of three self-calls; version 2: the
    # visitor's Impulse, its self-call.
    assert result.records_replayed == 4
    # Version 1's three self-calls, made again by v2's on_first_start, then the visitor's.
    assert [o.rpc_type for o in result.outputs] == [RpcType.FORK] * 4
    assert {o.destination for o in result.outputs} == {"book"}
    # Naming version 1's checkpoint gives the same history.
    named = upgrade_test("book", BookV1, BookV2, checkpoint=old[0], home=launcher.home)
    assert named.state.counts == FINAL
    assert named.outputs == result.outputs
    assert named.records_replayed == result.records_replayed


def test_without_the_old_versions_files_the_error_says_what_to_run(
        launcher: Launcher) -> None:
    _upgrade_live(launcher)
    from ambrosia_ic import registry

    shutil.rmtree(registry.instance_dir(registry.load("book", launcher.home), 1))
    with pytest.raises(AlreadyUpgradedError) as err:
        upgrade_test("book", BookV1, BookV2, home=launcher.home)
    assert str(err.value) == (
        "book was upgraded live to version 2 and no earlier version's files are kept: "
        "nothing recorded by the old code is left to upgrade-test; replay version 2 with "
        "repro('book', <the new class>)")
