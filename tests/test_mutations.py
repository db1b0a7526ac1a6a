"""The suites catch the bugs that equality without types once hid.

Each case runs a suite in a fresh interpreter with one bug planted (``tests/mutants.py``)
and expects pytest's "tests failed" exit code, so a suite that no longer tells the wrong
message or event type from the right one fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_suite(mutant: str, *paths: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMBROSIA_MUTANT=mutant)
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.mutants", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-x", *paths],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )


@pytest.mark.parametrize(("mutant", "suite"), [
    ("decoder-swaps-take-checkpoint-and-becoming-primary", "tests/wire/test_golden.py"),
    ("protocol-swaps-checkpoint-load-started-and-loaded", "tests/protocol"),
])
def test_the_suite_fails_with_the_bug_planted(mutant: str, suite: str) -> None:
    result = _run_suite(mutant, suite)
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout[-2000:]
    assert " failed" in result.stdout


def test_the_same_suites_pass_with_no_bug_planted() -> None:
    # The control: the failures above come from the planted bug, not from the harness.
    result = _run_suite("", "tests/wire/test_golden.py", "tests/protocol/test_flows.py")
    assert result.returncode == pytest.ExitCode.OK, result.stdout[-2000:]
