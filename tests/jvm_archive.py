"""A class-data sharing archive for the Spark JVMs the tests start: ``python -m
tests.jvm_archive`` (``make test`` runs it before the tests) keeps a valid archive or makes
one, and ``java_options()`` gives the options every test JVM starts with.

A Spark JVM loads some 15,000 classes from Spark's jars as it starts and again for its
first query; read from the archive (mapped, already parsed and verified) instead, a
Connect server reached its open port with about half the CPU (see ``tests/conftest.py``).

The archive is the classes one Connect server loaded through a word count
(``-XX:ArchiveClassesAtExit``, written as the JVM stops), made under a temporary name and
renamed into place only once a JVM has loaded it with ``-Xshare:on``: a JVM maps the file
as it is, and one cut short crashes every JVM that maps it. A JVM whose JDK or class path
differs from the archive's says so in one warning line in its log and runs without it;
this module notices the same and makes the archive again. Nothing else writes the file,
and it lives under ``build/`` (not in git)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "build" / "spark-cds" / "spark.jsa"
JIT_FIRST_TIER = "-XX:TieredStopAtLevel=1"


def java_options(archive: Path = ARCHIVE) -> list[str]:
    """The options of every test JVM: the JIT's first tier, and the archive if there is one
    (a stale one is ignored by the JVM, with a warning in its log)."""
    shared = [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []
    return [JIT_FIRST_TIER, *shared]


def _made_with(archive: Path) -> Path:
    """The file beside the archive that names the JVM and the class path it was made with."""
    return archive.with_name(archive.name + ".jvm")


def usable(archive: Path = ARCHIVE) -> bool:
    """Whether a JVM on the class path the archive was made with loads it (``-Xshare:on``
    fails where the JDK, a jar or the file itself differs from when it was made)."""
    try:
        java, class_path = _made_with(archive).read_text().split("\n")
    except (OSError, ValueError):
        return False
    if not archive.is_file():
        return False
    try:
        done = subprocess.run(
            [java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp", class_path,
             "-version"], capture_output=True, timeout=120)
    except OSError:  # that JDK is gone
        return False
    return done.returncode == 0


def _jvm_and_class_path(pid: int) -> str:
    """The java binary of a running JVM and its class path, a line each."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return f"{os.readlink(f'/proc/{pid}/exe')}\n{args[args.index(b'-cp') + 1].decode()}"


def _word_count(url: str, work: Path) -> None:
    """What the tests ask of Spark, once: read a text file, count its words, collect the
    counts and write them as JSON lines."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as sf

    text = work / "words.txt"
    text.write_text("\n".join(" ".join(f"w{(i * j) % 97}" for j in range(i % 7 + 1))
                              for i in range(500)) + "\n")
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        lines = spark.read.text(str(text))
        words = lines.select(sf.explode(sf.split(sf.col("value"), r"\s+")).alias("word"))
        counts = words.where(sf.col("word") != "").groupBy("word").count()
        assert counts.collect()
        counts.write.mode("error").json(str(work / "out"))
    finally:
        spark.stop()


def make(archive: Path = ARCHIVE) -> None:
    """Make the archive from one Connect server's word count, and put it in place.

    Raises:
        RuntimeError: the JVM wrote no archive, or one that a JVM does not load.
    """
    from ambrosia_services.jobs.spark import ConnectServer

    from ambrosia_core.ports import free_ports

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix="making-") as tmp:
        work = Path(tmp)
        made = work / archive.name
        os.environ["SPARK_SUBMIT_OPTS"] = f"{JIT_FIRST_TIER} -XX:ArchiveClassesAtExit={made}"
        server = ConnectServer(free_ports(1)[0], master="local[2]", log_dir=work)
        server.start()
        try:
            assert server.pid is not None
            _made_with(made).write_text(_jvm_and_class_path(server.pid))
            _word_count(server.url, work)
        finally:
            server.stop(grace=120)  # the archive is written as the JVM exits
        if not usable(made):
            log = (work / "connect-server.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the Connect server made no usable archive:\n{log}")
        os.replace(_made_with(made), _made_with(archive))
        os.replace(made, archive)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.jvm_archive", description=__doc__)
    parser.parse_args(argv)
    if usable():
        return 0
    start = time.monotonic()
    print("making the Spark JVMs' class-data archive (once per machine)", flush=True)
    try:
        make()
    except Exception as error:  # the tests run without an archive: slower, as correct
        print(f"no class-data archive: {error}", file=sys.stderr)
        return 0
    print(f"made {ARCHIVE.relative_to(ROOT)} in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
