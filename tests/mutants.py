"""Deliberate bugs for mutation tests, loaded as a pytest plugin (``-p tests.mutants``).

``AMBROSIA_MUTANT`` names the bug to plant before the suite runs. Each one once passed a
suite that compared values without their types; ``tests/test_mutations.py`` runs the
suites with each planted and expects them to fail.
"""

from __future__ import annotations

import os
import types

import pytest


def _swap_decoded_take_checkpoint_and_becoming_primary() -> None:
    from ambrosia_core.wire import decoder

    table = decoder._EMPTY_MESSAGES
    table[2], table[15] = table[15], table[2]


def _swap_checkpoint_load_started_and_loaded() -> None:
    from ambrosia_py.protocol import _receive_side, events

    # Only the state machine sees the swap; the tests keep the true classes.
    swapped = types.SimpleNamespace(**vars(events))
    swapped.CheckpointLoaded = events.CheckpointLoadStarted
    swapped.CheckpointLoadStarted = events.CheckpointLoaded
    _receive_side.ev = swapped  # type: ignore[assignment]


MUTANTS = {
    "decoder-swaps-take-checkpoint-and-becoming-primary":
        _swap_decoded_take_checkpoint_and_becoming_primary,
    "protocol-swaps-checkpoint-load-started-and-loaded":
        _swap_checkpoint_load_started_and_loaded,
}


def pytest_configure(config: pytest.Config) -> None:
    name = os.environ.get("AMBROSIA_MUTANT", "")
    if name:
        MUTANTS[name]()
