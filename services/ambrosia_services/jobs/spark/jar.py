"""The staged-records source for the JVM: a jar built from ``java/`` on first use.

``java/ambrosia/staging`` is a Spark data source, ``ambrosia-staged``, that reads staged
blocks on the executors without a Python worker: a fresh Spark Connect session (a runner
opens one per attempt) then costs no Python start-up, and the records go from the segment
files to Spark's rows in the JVM (see ``staged.py``). It is compiled against the jars of the
installed pyspark with the ``javac`` of the JDK Spark runs on, once, into a cache named by a
hash of its sources and the pyspark version; a Connect server started by ``ConnectServer``
gets it with ``--jars`` (executors of a cluster fetch it from the driver).

A Connect server started otherwise needs it too::

    spark-submit ... --jars "$(python -m ambrosia_services.jobs.spark.jar)" ...

Without it, runners read staged records with Python on the executors (the same rows,
slower). No pyspark import: only files and processes.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ..errors import SparkServerError

__all__ = ["SOURCE_NAME", "JarBuildError", "jar_cache", "pyspark_jars", "staged_source_jar"]

SOURCE_NAME: Final = "ambrosia-staged"
JAVA_ROOT: Final = Path(__file__).with_name("java")


class JarBuildError(SparkServerError):
    """The staged-records jar could not be built (no JDK, or javac refused the sources)."""


def pyspark_jars() -> Path:
    """The ``jars`` directory of the installed pyspark (found without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarBuildError("pyspark is not installed (pip install 'ambrosia-py[spark]')")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    if not jars.is_dir():
        raise JarBuildError(f"pyspark has no jars directory at {jars}")
    return jars


def jar_cache() -> Path:
    """Where built jars are kept: ``$AMBROSIA_JAR_CACHE``, else the user's cache."""
    configured = os.environ.get("AMBROSIA_JAR_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ambrosia-py" / "jars"


def _sources() -> list[Path]:
    return sorted(JAVA_ROOT.rglob("*.java"))


def _resources() -> list[Path]:
    return sorted(p for p in (JAVA_ROOT / "META-INF").rglob("*") if p.is_file())


def _key() -> str:
    digest = hashlib.sha256()
    try:
        digest.update(importlib.metadata.version("pyspark").encode())
    except importlib.metadata.PackageNotFoundError:
        digest.update(b"pyspark?")
    for path in _sources() + _resources():
        digest.update(path.relative_to(JAVA_ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _javac() -> str:
    """javac of the JDK that ``java`` belongs to (``JAVA_HOME`` first), else on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if found is None:
        raise JarBuildError("javac not found (JAVA_HOME or PATH): a JDK 17 builds the "
                            "staged-records source")
    return found


def staged_source_jar() -> Path:
    """The jar of the ``ambrosia-staged`` source, built now if it is not in the cache.

    Raises:
        JarBuildError: no JDK, or the build failed (the message holds javac's first lines).
    """
    target = jar_cache() / f"ambrosia-staged-{_key()}.jar"
    if target.is_file():
        return target
    jars = pyspark_jars()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ambrosia-jar-", dir=target.parent) as tmp:
        classes = Path(tmp) / "classes"
        command = [_javac(), "--release", "17", "-nowarn", "-encoding", "UTF-8",
                   "-cp", str(jars / "*"), "-d", str(classes), *map(str, _sources())]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            first = " | ".join((done.stderr or done.stdout).strip().splitlines()[:4])
            raise JarBuildError(f"javac failed building the staged-records source: {first}")
        built = Path(tmp) / target.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
            for path in _resources():
                jar.write(path, path.relative_to(JAVA_ROOT).as_posix())
        os.replace(built, target)  # whole or not at all, for a concurrent builder too
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ambrosia_services.jobs.spark.jar",
        description="Build (once) and print the path of the staged-records jar, for "
                    "`spark-submit --jars` of a Connect server started by hand.",
    )
    parser.parse_args(argv)
    try:
        print(staged_source_jar())
    except JarBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
