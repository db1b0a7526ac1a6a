"""The one durable-write helper: a replaced file is whole or absent, the directory is
fsynced after the rename, and every durable file of the coordinator and the registry is
written through it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_ic import lease, logstore, registry

from ambrosia_core import durable
from ambrosia_core.wire import Checkpoint


@pytest.fixture
def dir_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, list[str]]]:
    """Every directory fsync the helper makes, with the directory's entries at that
    moment (so a test sees that the rename came before the sync). The real fsync runs."""
    calls: list[tuple[Path, list[str]]] = []
    real = durable.fsync_dir

    def counting(d: Path) -> None:
        calls.append((Path(d), sorted(p.name for p in Path(d).iterdir())))
        real(d)

    monkeypatch.setattr(durable, "fsync_dir", counting)
    return calls


def test_new_file_is_whole_and_its_directory_synced_after_the_rename(
        tmp_path: Path, dir_syncs: list[tuple[Path, list[str]]]) -> None:
    target = tmp_path / "state"
    durable.replace_durably(target, [b"one ", b"two ", b"three"])
    assert target.read_bytes() == b"one two three"
    assert dir_syncs == [(tmp_path, ["state"])]
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


def test_replacing_keeps_the_old_file_whole_when_the_write_fails(
        tmp_path: Path, dir_syncs: list[tuple[Path, list[str]]]) -> None:
    target = tmp_path / "state"
    durable.replace_durably(target, b"old content")

    def pieces() -> Iterator[bytes]:
        yield b"half of the new"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left on device"):
        durable.replace_durably(target, pieces())
    assert target.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # no temporary left
    assert len(dir_syncs) == 1  # only the first, successful write synced the directory


def test_a_failed_first_write_leaves_nothing(tmp_path: Path) -> None:
    def pieces() -> Iterator[bytes]:
        yield b"partial"
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        durable.replace_durably(tmp_path / "state", pieces())
    assert list(tmp_path.iterdir()) == []


def test_exclusive_write_keeps_the_first_writers_content(
        tmp_path: Path, dir_syncs: list[tuple[Path, list[str]]]) -> None:
    target = tmp_path / "secret"
    durable.replace_durably(target, b"first", mode=0o600, exclusive=True)
    with pytest.raises(FileExistsError):
        durable.replace_durably(target, b"second", exclusive=True)
    assert target.read_bytes() == b"first"
    assert oct(target.stat().st_mode & 0o777) == oct(0o600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"]
    assert dir_syncs == [(tmp_path, ["secret"])]


def test_every_durable_file_goes_through_the_helper(
        tmp_path: Path, dir_syncs: list[tuple[Path, list[str]]]) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    logstore.write_checkpoint(d, 3, {"format": 1}, Checkpoint(0).encode(), [b""])
    logstore.write_seal(d, 3, 1234)
    lease.Epochs(d).mark_upgraded(2)
    home = tmp_path / "home"
    registry.register(instance_name="alpha", receive_port=41001, send_port=41002,
                      ic_port=41003, log_dir=tmp_path / "alpha-logs", home=home)
    registry.set_versions("alpha", 0, 1, home)
    synced = [(d_.name, entries) for d_, entries in dir_syncs]
    assert [(name, [e for e in entries if not e.startswith(".")]) for name, entries in synced] \
        == [
            ("logs", ["serverchkpt3"]),
            ("logs", ["serverchkpt3", "serverseal3"]),
            ("logs", ["serverchkpt3", "serverseal3", "serverupgraded"]),
            # Each directory the registration creates is synced into its parent (the log
            # directory, the home, then its instances directory), before a file in it.
            (tmp_path.name, ["alpha-logs", "logs"]),
            (tmp_path.name, ["alpha-logs", "home", "logs"]),
            ("home", ["link-secret"]),
            ("home", ["instances", "link-secret"]),
            ("instances", ["alpha.json"]),
            ("instances", ["alpha.json"]),
        ]
    assert logstore.read_seal(d, 3) == 1234
    assert logstore.CheckpointFile(d / "serverchkpt3").state == {"format": 1}
    assert lease.Epochs(d).upgraded_to() == 2
    assert registry.load("alpha", home).upgrade_version == 1


def test_make_dirs_syncs_each_new_directory_into_its_parent(
        tmp_path: Path, dir_syncs: list[tuple[Path, list[str]]]) -> None:
    durable.make_dirs(tmp_path / "a" / "b" / "c")
    assert [(d.relative_to(tmp_path).as_posix(), entries) for d, entries in dir_syncs] == [
        (".", ["a"]), ("a", ["b"]), ("a/b", ["c"])]
    dir_syncs.clear()
    durable.make_dirs(tmp_path / "a" / "b")  # there already: nothing to sync
    assert dir_syncs == []
    (tmp_path / "f").write_text("")
    with pytest.raises(FileExistsError):
        durable.make_dirs(tmp_path / "f")
