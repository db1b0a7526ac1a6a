"""The two log sinks, on real files: a standalone writer, and an active/active primary's
writer fenced by epochs (it writes nothing once another replica claimed a newer epoch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ambrosia_ic import registry
from ambrosia_ic.coordinator import Coordinator, FencedSink, StandaloneSink
from ambrosia_ic.coordinator.sink import log_region
from ambrosia_ic.errors import LockLostError
from ambrosia_ic.lease import Epochs
from ambrosia_ic.logstore import log_path
from ambrosia_ic.replication.shared_dir import SharedDirReplica

from ambrosia_core.errors import CoordinatorError


def test_a_fenced_primary_stops_writing_once_a_newer_epoch_is_claimed(tmp_path: Path) -> None:
    mine = Epochs(tmp_path)
    assert mine.claim(1, {"replica": 0})
    sink = FencedSink(mine)
    assert sink.epoch == 1
    writer = sink.next_log(tmp_path, 1)
    sink.write(writer, b"record one")
    other = Epochs(tmp_path)
    assert other.claim(2, {"replica": 1})
    fenced = (f"{tmp_path}: epoch 2 was claimed by another replica; this primary "
              "(epoch 1) was fenced off and stops without writing")
    with pytest.raises(LockLostError) as err:
        sink.write(writer, b"record two")
    assert str(err.value) == fenced
    # Then zeros written ahead, which a primary never cuts (followers may be reading).
    assert log_path(tmp_path, 1).read_bytes().rstrip(b"\0") == b"record one"
    with pytest.raises(LockLostError) as err:
        sink.next_log(tmp_path, 2)
    assert str(err.value) == fenced
    assert not log_path(tmp_path, 2).exists()
    writer.close()
    assert log_path(tmp_path, 1).stat().st_size > len(b"record one")
    mine.close()
    other.close()


def test_a_fenced_primary_never_appends_to_a_log_another_created(tmp_path: Path) -> None:
    epochs = Epochs(tmp_path)
    assert epochs.claim(1, {"replica": 0})
    log_path(tmp_path, 4).write_bytes(b"theirs")
    with pytest.raises(LockLostError) as err:
        FencedSink(epochs).next_log(tmp_path, 4)
    assert str(err.value) == f"{log_path(tmp_path, 4)} was created by another primary"
    assert log_path(tmp_path, 4).read_bytes() == b"theirs"
    epochs.close()


def test_a_standalone_writer_stamps_no_epoch_and_appends(tmp_path: Path) -> None:
    sink = StandaloneSink()
    assert sink.epoch is None
    log_path(tmp_path, 2).write_bytes(b"cut-off tail kept by the recovery ")
    writer = sink.next_log(tmp_path, 2)
    sink.write(writer, b"then this")
    writer.close()
    assert log_path(tmp_path, 2).read_bytes() == b"cut-off tail kept by the recovery then this"


def test_a_standalone_writer_cuts_the_zeros_off_before_the_next_log_exists(
        tmp_path: Path) -> None:
    sink = StandaloneSink(region=4096)
    first = sink.next_log(tmp_path, 1)
    sink.write(first, b"record one")
    assert log_path(tmp_path, 1).stat().st_size > first.size  # zeros written ahead
    second = sink.next_log(tmp_path, 2, first)
    # Cut before ``first`` is closed: a crash now leaves no older log ending in zeros.
    assert log_path(tmp_path, 1).read_bytes() == b"record one"
    first.close()
    second.close()
    assert log_path(tmp_path, 2).read_bytes() == b""


def test_the_region_comes_from_the_environment() -> None:
    assert log_region({}) == log_region({"AMBROSIA_IC_PREALLOC": "1"}) == 1 << 20
    assert log_region({"AMBROSIA_IC_PREALLOC": "0"}) == 0
    assert log_region({"AMBROSIA_IC_PREALLOC": "64"}) == 64 * 1024
    with pytest.raises(CoordinatorError, match=r"AMBROSIA_IC_PREALLOC='x': expected 0"):
        log_region({"AMBROSIA_IC_PREALLOC": "x"})


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.mark.parametrize(("sink", "kept"), [
    # Standalone: the newest checkpoint with its log and digest (seals are not its own).
    (StandaloneSink(), ["serverchkpt3", "serverdigest3", "serverlog3",
                        "serverseal1", "serverseal2", "serverseal3"]),
    # Fenced: at least two checkpoints with their logs and seals (no digests of its own).
    (FencedSink(Epochs(Path("/nonexistent"))),
     ["serverchkpt2", "serverchkpt3", "serverdigest1", "serverdigest2", "serverdigest3",
      "serverlog2", "serverlog3", "serverseal2", "serverseal3"]),
])
def test_what_each_sink_keeps_after_a_checkpoint(
        tmp_path: Path, sink: StandaloneSink | FencedSink, kept: list[str]) -> None:
    for n in (1, 2, 3):
        for prefix in ("serverchkpt", "serverlog", "serverdigest", "serverseal"):
            (tmp_path / f"{prefix}{n}").write_bytes(b"")
    sink.remove_unkept(tmp_path, 1, ())
    assert _files(tmp_path) == kept


def test_only_a_fenced_sink_runs_an_active_active_instance(tmp_path: Path) -> None:
    home = tmp_path / "home"
    solo = registry.register(instance_name="solo", receive_port=42001, send_port=42002,
                             ic_port=42003, log_dir=tmp_path / "logs", home=home)
    pair = registry.register(instance_name="pair", receive_port=42011, send_port=42012,
                             ic_port=42013, log_dir=tmp_path / "logs", active_active=True,
                             home=home)
    refused = ("{}: active/active instances run as replicas (ambrosia ic --replica N); "
               "register with --active-active to use --replica")
    with pytest.raises(CoordinatorError) as err:
        Coordinator(solo, home, replica=1)
    assert str(err.value) == refused.format("solo")
    with pytest.raises(CoordinatorError) as err:
        Coordinator(pair, home)
    assert str(err.value) == refused.format("pair")
    assert isinstance(Coordinator(solo, home).sink, StandaloneSink)
    replica = SharedDirReplica(pair, home)
    assert replica.c.sink is replica.fenced and isinstance(replica.c.sink, FencedSink)
    with pytest.raises(CoordinatorError) as err:
        SharedDirReplica(solo, home)
    assert str(err.value) == ("solo is not registered with --active-active; run it "
                              "without --replica")


def test_an_uncommitted_versions_directory_loses_its_history_files_and_keeps_its_epochs(
        tmp_path: Path) -> None:
    """What a replica set's upgrade clears before it writes the new version (the attempts
    killed before the registration named it): logs, seals, checkpoints and their
    temporary files; never the epochs, one of which the upgrader has just claimed."""
    from ambrosia_ic.logstore import remove_uncommitted_version

    gone = ["serverlog1", "serverlog2", "serverseal1", "serverchkpt1", "serverchkpt2",
            ".serverchkpt3.0badc0de.tmp"]
    kept = ["serverepoch1", "serverepoch2", "servercheckpointer", "serverupgraded",
            "serverlogs", "notes.txt"]
    for name in gone + kept:
        (tmp_path / name).write_bytes(b"x")
    remove_uncommitted_version(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
