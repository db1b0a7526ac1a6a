"""The live upgrade's first step as a decision with no process (``start_plan.choose_upgrade``):
which of finish, start afresh or retry a start registered for version M takes, from the two
directories alone, and that deciding writes nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from ambrosia_ic.coordinator.start_plan import UpgradePlan, choose_upgrade
from ambrosia_ic.logstore import CHECKPOINT_PREFIX, DIGEST_PREFIX, LOG_PREFIX

from ambrosia_core.errors import CoordinatorError


def _files(d: Path, **named: list[int]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for prefix, numbers in named.items():
        for k in numbers:
            (d / f"{prefix}{k}").write_bytes(b"x")


def _snapshot(*dirs: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in dirs if d.is_dir() for p in sorted(d.iterdir())}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "0", tmp_path / "1"


def test_a_checkpoint_in_the_new_directory_means_the_upgrade_finished(
        dirs: tuple[Path, Path]) -> None:
    old, new = dirs
    _files(old, **{CHECKPOINT_PREFIX: [1, 2], LOG_PREFIX: [1, 2]})
    _files(new, **{CHECKPOINT_PREFIX: [3], LOG_PREFIX: [3], DIGEST_PREFIX: [3]})
    before = _snapshot(old, new)
    assert choose_upgrade(old, new, 7, 1) == UpgradePlan("finished", 1)
    assert _snapshot(old, new) == before


def test_an_attempt_that_died_before_its_checkpoint_is_retried_and_its_leftovers_named(
        dirs: tuple[Path, Path]) -> None:
    old, new = dirs
    _files(old, **{CHECKPOINT_PREFIX: [1, 2], LOG_PREFIX: [1, 2]})
    _files(new, **{LOG_PREFIX: [3], DIGEST_PREFIX: [3]})
    before = _snapshot(old, new)
    plan = choose_upgrade(old, new, 7, 1)
    assert plan == UpgradePlan("retry", 1, (new / f"{LOG_PREFIX}3", new / f"{DIGEST_PREFIX}3"))
    assert type(plan) is UpgradePlan
    assert _snapshot(old, new) == before  # the shell removes them, not the decision


def test_no_new_directory_is_a_plain_retry(dirs: tuple[Path, Path]) -> None:
    old, new = dirs
    _files(old, **{CHECKPOINT_PREFIX: [2], LOG_PREFIX: [2]})
    assert choose_upgrade(old, new, 7, 2) == UpgradePlan("retry", 2)
    assert not new.exists()


def test_an_instance_that_never_started_starts_the_new_version_afresh(
        dirs: tuple[Path, Path]) -> None:
    old, new = dirs
    old.mkdir()
    _files(new, **{LOG_PREFIX: [1]})
    assert choose_upgrade(old, new, 7, 1) == UpgradePlan("afresh", 1, (new / f"{LOG_PREFIX}1",))


def test_an_instance_that_went_live_with_its_old_log_gone_is_refused_not_begun_afresh(
        dirs: tuple[Path, Path]) -> None:
    """Its history is gone, not missing: starting the new version afresh would apply
    every call again, and the registration would already name the new version."""
    old, new = dirs
    old.mkdir()
    with pytest.raises(CoordinatorError) as refused:
        choose_upgrade(old, new, 7, 1, name="svc", started=True)
    text = str(refused.value)
    assert "\n" not in text and text.startswith("svc has started before") and str(old) in text
    assert not new.exists()


def test_a_temporary_checkpoint_a_killed_attempt_left_is_removed_with_its_leftovers(
        dirs: tuple[Path, Path]) -> None:
    old, new = dirs
    _files(old, **{CHECKPOINT_PREFIX: [1, 2], LOG_PREFIX: [1, 2]})
    _files(new, **{LOG_PREFIX: [3]})
    temp = new / f".{CHECKPOINT_PREFIX}3.0a1b2c3d.tmp"
    temp.write_bytes(b"AMBRCKP2")
    plan = choose_upgrade(old, new, 7, 1)
    assert plan == UpgradePlan("retry", 1, (new / f"{LOG_PREFIX}3", temp))


def test_starting_afresh_also_names_the_interrupted_first_starts_temporary_checkpoint(
        dirs: tuple[Path, Path]) -> None:
    old, new = dirs
    _files(old, **{CHECKPOINT_PREFIX: [1]})
    temp = old / f".{CHECKPOINT_PREFIX}1.00ff00ff.tmp"
    temp.write_bytes(b"AMBRCKP2")
    assert choose_upgrade(old, new, 7, 1) == UpgradePlan("afresh", 1, (temp,))
