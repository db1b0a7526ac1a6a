"""The class-data archive of the test JVMs (``tests/jvm_archive.py``) is used only when a
JVM loads it as it is: one cut short (a JVM that maps it dies of SIGBUS) or made on a class
path whose jar has changed since is made again, never handed to the tests' JVMs as good."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.jvm_archive import java_options, made_with, usable

HELLO = "public class Hello { public static void main(String[] a) { } }"


@pytest.fixture(scope="module")
def hello_class(tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("hello")
    (here / "Hello.java").write_text(HELLO)
    subprocess.run(["javac", "-d", str(here), str(here / "Hello.java")], check=True)
    return here / "Hello.class"


@pytest.fixture
def archive(hello_class: Path, tmp_path: Path) -> Path:
    """A dynamic archive of a one-class jar, with the record of how it was made."""
    jar = tmp_path / "hello.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.write(hello_class, "Hello.class")
    made = tmp_path / "hello.jsa"
    java = shutil.which("java")
    assert java is not None
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={made}", "-cp", str(jar), "Hello"],
                   check=True, capture_output=True)
    made_with(made).write_text(f"{java}\n{jar}")
    return made


def test_an_archive_a_jvm_loads_is_used_and_a_missing_one_is_not(archive: Path) -> None:
    assert usable(archive)
    assert java_options(archive) == ["-XX:TieredStopAtLevel=1",
                                     f"-XX:SharedArchiveFile={archive}"]
    missing = archive.with_name("none.jsa")
    assert not usable(missing)
    assert java_options(missing) == ["-XX:TieredStopAtLevel=1"]


def test_an_archive_cut_short_is_not_usable(archive: Path) -> None:
    data = archive.read_bytes()
    os.chmod(archive, 0o644)
    archive.write_bytes(data[:len(data) // 2])
    assert not usable(archive)


def test_an_archive_of_a_jar_that_changed_since_is_not_usable(archive: Path) -> None:
    jar = Path(made_with(archive).read_text().split("\n")[1])
    with zipfile.ZipFile(jar, "a") as z:
        z.writestr("extra.txt", "a jar rebuilt since the archive was made")
    assert not usable(archive)


def test_an_archive_without_the_record_of_its_jvm_is_not_usable(archive: Path) -> None:
    made_with(archive).unlink()
    assert not usable(archive)
