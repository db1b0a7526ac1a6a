"""Both readers of staged records (the JVM source and the Python workers) against the
segments the coordinator writes: the same rows, in order, as Python reads them back; the
same one-line errors for a damaged or missing block; and the jar they need built once."""

from __future__ import annotations

import os
import shutil
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xxhash
from ambrosia_services.jobs.spark import ConnectServer
from ambrosia_services.jobs.spark import _connect_internals as internals
from ambrosia_services.jobs.spark.jar import JarBuildError, staged_source_jar
from ambrosia_services.jobs.spark.staged import jvm_source_available, staged_records
from ambrosia_services.staging import Ref, SegmentWriter, read_payloads
from ambrosia_services.staging.segments import HEADER
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.integration]

READERS = ("jvm", "python")


@pytest.fixture(scope="module")
def session(connect_server: ConnectServer) -> Iterator[Any]:
    spark = internals.new_session(connect_server.url, uuid.uuid4())
    try:
        yield spark
    finally:
        spark.stop()


def _stage(root: Path, runs: list[list[bytes]], segment_bytes: int = 300) -> list[Ref]:
    writer = SegmentWriter(root, f"p{uuid.uuid4().hex[:6]}", segment_bytes=segment_bytes)
    refs, first = [], 1
    for stream, run in enumerate(runs):
        last = first + len(run) - 1
        if stream % 2:  # BLK2, as the coordinator writes: each message's id and key too
            ids = list(range(first, last + 1))
            refs.append(writer.append(stream % 3, first, last, run, ids,
                                      [b"key%d" % i for i in ids]))
        else:
            refs.append(writer.append(stream % 3, first, last, run))
        first += len(run)
    writer.sync()
    writer.close()
    return refs


def _rows(spark: Any, root: Path, refs: list[Ref], reader: str,
          partition_bytes: int = 64) -> list[str]:
    args = {"staging": str(root), "refs": [r.to_list() for r in refs]}
    frame = staged_records(spark, args, partition_bytes=partition_bytes, reader=reader)
    return [row["value"] for row in frame.collect()]


# Lead and continuation bytes at the edges of their ranges, so that truncated sequences,
# surrogates, overlong forms and code points past U+10FFFF come up often.
_PIECES = [b"a", b"\n", b"\x80", b"\x8f", b"\x90", b"\x9f", b"\xa0", b"\xbf", b"\xc0",
           b"\xc2", b"\xdf", b"\xe0", b"\xe2\x82", b"\xed", b"\xee", b"\xf0", b"\xf4",
           b"\xf5", b"\xff"]
payload = st.one_of(
    st.text(max_size=40).map(str.encode),  # any code point, as UTF-8
    st.binary(max_size=40),  # mostly not UTF-8: each reader must replace as Python does
    st.lists(st.sampled_from(_PIECES), max_size=12).map(b"".join),
)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(st.lists(payload, min_size=1, max_size=12), min_size=1, max_size=8))
def test_both_readers_give_every_record_in_order_as_python_decodes_it(
        session: Any, tmp_path_factory: pytest.TempPathFactory,
        runs: list[list[bytes]]) -> None:
    root = tmp_path_factory.mktemp("staged")
    refs = _stage(root, runs)
    expected = [p.decode("utf-8", "replace") for p in read_payloads(root, refs)]
    assert expected == [p.decode("utf-8", "replace") for run in runs for p in run]
    for reader in READERS:  # several segments and several partitions, in order
        assert _rows(session, root, refs, reader) == expected, reader


def test_the_readers_agree_on_the_replacement_of_every_kind_of_bad_utf8(
        session: Any, tmp_path: Path) -> None:
    bad = [b"\xff", b"a\x80b", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80",
           b"\xc0\xaf", b"\xf4\x90\x80\x80", b"ok \xe2\x82\xac \xfe\xfe end", b""]
    refs = _stage(tmp_path, [bad])
    expected = [p.decode("utf-8", "replace") for p in bad]
    for reader in READERS:
        assert _rows(session, tmp_path, refs, reader) == expected, reader


def _damage(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))


def _reseal(path: Path, ref: Ref, edit: dict[int, bytes]) -> Ref:
    """Rewrite bytes of ``ref``'s block and give it a matching check again: a block whose
    checks hold but whose insides are wrong, as only a bug (not a disk) makes one."""
    raw = bytearray(path.read_bytes()[ref.offset:ref.offset + ref.length])
    for at, data in edit.items():
        raw[at:at + len(data)] = data
    check = xxhash.xxh64_intdigest(bytes(raw[:-8]))
    raw[-8:] = struct.pack("<Q", check)
    with open(path, "r+b") as f:
        f.seek(ref.offset)
        f.write(raw)
    return Ref(ref.stream_id, ref.first_id, ref.last_id, ref.count, ref.size, ref.segment,
               ref.offset, ref.length, check, ref.lines)


@pytest.mark.parametrize("reader", READERS)
def test_a_bad_block_fails_the_read_with_one_line_naming_it(
        session: Any, tmp_path: Path, reader: str) -> None:
    refs = _stage(tmp_path, [[b"one\n", b"two\n"], [b"three\n"], [b"four\n", b"five\n"]],
                  segment_bytes=1)  # a segment per block
    assert len({r.segment for r in refs}) == 3
    damaged, reordered, missing = refs
    _damage(tmp_path / damaged.segment, damaged.offset + damaged.length - 10)
    offsets = HEADER.size  # the second offset points past the third
    reordered = _reseal(tmp_path / reordered.segment, reordered,
                        {offsets: struct.pack("<I", 5)})
    (tmp_path / missing.segment).unlink()
    cases = {
        "damaged": (damaged, f"SegmentDamagedError: staged segment {tmp_path / damaged.segment}"
                             f", block at {damaged.offset}: damaged (its check bytes differ)"),
        "reordered": (reordered, f"SegmentDamagedError: staged segment "
                                 f"{tmp_path / reordered.segment}, block at "
                                 f"{reordered.offset}: its record offsets are out of order"),
        "missing": (missing, f"SegmentMissingError: staged segment "
                             f"{tmp_path / missing.segment} is missing (its block at "
                             f"{missing.offset} holds stream 2's messages 4..5)"),
    }
    for name, (ref, line) in cases.items():
        with pytest.raises(Exception) as caught:
            _rows(session, tmp_path, [ref], reader)
        assert line in str(caught.value), (name, str(caught.value)[:2000])


def test_the_jvm_source_is_found_on_a_server_started_here_and_missing_names_are_not(
        session: Any) -> None:
    assert jvm_source_available(session)
    assert not jvm_source_available(session, "no-such-source-anywhere")


def test_the_jar_is_built_once_per_source_and_a_missing_jdk_is_one_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBROSIA_JAR_CACHE", str(tmp_path / "cache"))
    jar = staged_source_jar()
    assert jar.parent == tmp_path / "cache" and jar.is_file()
    built = jar.stat().st_mtime_ns
    assert staged_source_jar() == jar and jar.stat().st_mtime_ns == built  # reused
    import zipfile

    names = set(zipfile.ZipFile(jar).namelist())
    assert "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister" in names
    assert "ambrosia/staging/BlockReader.class" in names
    monkeypatch.setenv("AMBROSIA_JAR_CACHE", str(tmp_path / "other"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    with pytest.raises(JarBuildError, match="javac not found"):
        staged_source_jar()
    assert not (tmp_path / "other").exists() or not os.listdir(tmp_path / "other")
    assert shutil.which("javac") is None
