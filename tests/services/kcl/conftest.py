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

__all__ = ["Launcher", "kclpy", "launcher"]

KCLPY = "amazon-kclpy==3.2.0"
KCLPY_DIR = "amazon_kclpy-3.2.0"


@pytest.fixture(scope="session")
def kclpy() -> Path:
    """The unpacked sdist's root: ``amazon_kclpy`` and ``samples`` are under it."""
    cache = Path(os.environ.get("AMBROSIA_TEST_CACHE",
                                Path.home() / ".cache" / "ambrosia-py-tests"))
    root = cache / KCLPY_DIR
    if (root / "amazon_kclpy" / "kcl.py").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", KCLPY, "-d", tmp],
                       check=True, timeout=300)
        (sdist,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        try:
            os.replace(Path(tmp) / KCLPY_DIR, root)  # atomic: a parallel worker may win
        except OSError:
            if not (root / "amazon_kclpy" / "kcl.py").exists():
                raise
    return root
