"""The sink's directory on its own: recovery from a torn txn log, refusal of a damaged
one or of a committed file that disagrees with it, and one sink per directory."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from ambrosia_services.connectors.clients import FileSinkStore, SinkStoreCorruptError

from .helpers import ROOT


def _two_commits(directory: Path) -> None:
    store = FileSinkStore(directory)
    for txn, payload in (("t1", b"one\n"), ("t2", b"two\n")):
        start = store.output_offset
        store.write(start, payload)
        assert asyncio.run(store.prepare(txn, [(1, start, start + len(payload))])).commit
        assert asyncio.run(store.commit(txn))
    store.write(8, b"three\n")
    assert asyncio.run(store.prepare("t3", [(1, 8, 14)])).commit
    store.close_files()


def test_a_torn_last_record_is_ignored_and_cut_off(tmp_path: Path) -> None:
    _two_commits(tmp_path)
    log = tmp_path / "txnlog"
    good = log.read_bytes()
    whole = bytearray(good[-33:])  # the last record again (33 bytes), its check bytes wrong
    whole[-1] ^= 1
    for torn in (good[:20], good[-30:], bytes(whole)):  # cut short, length torn, bad check
        log.write_bytes(good + torn)
        store = FileSinkStore(tmp_path)
        assert (store.committed_offset, store.output_offset) == (8, 14)
        assert asyncio.run(store.uncommitted()) == ["t3"]
        assert log.read_bytes() == good
        store.close_files()
    store = FileSinkStore(tmp_path)
    assert asyncio.run(store.commit("t3"))
    store.close_files()
    assert (tmp_path / "committed").read_bytes() == b"one\ntwo\nthree\n"


def test_a_damaged_record_before_the_last_is_refused(tmp_path: Path) -> None:
    _two_commits(tmp_path)
    log = tmp_path / "txnlog"
    data = bytearray(log.read_bytes())
    data[10] ^= 0xFF  # inside the first record
    log.write_bytes(bytes(data))
    with pytest.raises(SinkStoreCorruptError, match="fails its check bytes"):
        FileSinkStore(tmp_path)
    # The command line says so in one line and exits 1.
    run = subprocess.run(
        [sys.executable, "-m", "ambrosia_services.connectors.clients.filesink", "--listen",
         "127.0.0.1:0", "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith("ambrosia-sink: txnlog record at")
    assert "Traceback" not in run.stderr


def test_a_committed_file_longer_than_the_log_says_is_refused(tmp_path: Path) -> None:
    _two_commits(tmp_path)
    with (tmp_path / "committed").open("ab") as f:
        f.write(b"stray\n")
    with pytest.raises(SinkStoreCorruptError, match="holds 14 bytes but the txnlog commits 8"):
        FileSinkStore(tmp_path)


def test_one_sink_per_directory(tmp_path: Path) -> None:
    store = FileSinkStore(tmp_path)
    with pytest.raises(BlockingIOError, match="another sink holds"):
        FileSinkStore(tmp_path)
    store.close_files()
    FileSinkStore(tmp_path).close_files()
