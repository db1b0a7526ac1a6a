"""Fixtures for the power-cut tests: a disk that can lose power, or one clear skip line
where FUSE is missing (counted in the run's summary)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .disk import PowerDisk, mounted


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerDisk]:
    with mounted(tmp_path) as d:
        yield d
