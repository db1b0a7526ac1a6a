"""A fenced primary of replicas sharing a directory rejoins as a standby by itself
(``rejoin``): three replicas, since the checkpointing secondary never takes over."""

from __future__ import annotations

from pathlib import Path

import pytest

from .rejoin import pause_resume_and_kill

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_paused_primary_rejoins_as_a_standby_and_takes_over_later(tmp_path: Path) -> None:
    pause_resume_and_kill(tmp_path, "", replicas=3)
