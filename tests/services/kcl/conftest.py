"""amazon-kclpy for the record processors under test, fetched the way CI can: its
sdist from PyPI (``pip download``, no build: its build fetches Java jars from Maven),
unpacked into a cache directory once and put on the children's PYTHONPATH. Its module
needs only the standard library. Nothing is vendored. The cache is
``$AMBROSIA_TEST_CACHE`` (default ``~/.cache/ambrosia-py-tests``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.launcher import Launcher, launcher

__all__ = ["Launcher", "kclpy", "kclpy_v1", "launcher"]

KCLPY = "3.2.0"  # what the current protocol's processors are tested with
# amazon-kclpy 1.x, for the older protocol: 1.3.1 asks for checkpoints as "checkpoint" and
# reads only the fields it uses; 1.5.1, the last 1.x, asks as "sequenceNumber" and needs
# every field the KCL 1.x daemon sent.
KCLPY_V1 = ("1.3.1", "1.5.1")


def unpacked_kclpy(version: str) -> Path:
    """amazon-kclpy ``version``'s sdist root (``amazon_kclpy`` and ``samples`` under it),
    fetched once into the cache."""
    cache = Path(os.environ.get("AMBROSIA_TEST_CACHE",
                                Path.home() / ".cache" / "ambrosia-py-tests"))
    root = cache / f"amazon_kclpy-{version}"
    if (root / "amazon_kclpy" / "kcl.py").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"amazon-kclpy=={version}", "-d", tmp],
                       check=True, timeout=300)
        (sdist,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        try:
            os.replace(Path(tmp) / root.name, root)  # atomic: a parallel worker may win
        except OSError:
            if not (root / "amazon_kclpy" / "kcl.py").exists():
                raise
    return root


@pytest.fixture(scope="session")
def kclpy() -> Path:
    """amazon-kclpy 3.2.0, unpacked."""
    return unpacked_kclpy(KCLPY)


@pytest.fixture(scope="session", params=KCLPY_V1)
def kclpy_v1(request: pytest.FixtureRequest) -> Path:
    """amazon-kclpy 1.x, unpacked (each of ``KCLPY_V1``)."""
    return unpacked_kclpy(request.param)
