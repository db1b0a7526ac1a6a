"""A live upgrade while a handler is suspended: the new version's first checkpoint
carries the state from before the handler began and the inputs since (its journal), and
that state is converted too, so a recovery from it holds the conversion."""

from __future__ import annotations

from typing import Any

from ambrosia_core.wire import UpgradeTakeCheckpoint, encode_control_record
from ambrosia_py.runtime.engine import Engine
from ambrosia_py.testing.inmemory import _COMMIT_ID, InMemoryCoordinator
from tests.runtime.apps import Patient

from .test_journal import _pad


class PatientV2(Patient):
    """The next version: it notes the conversion that made it."""

    version = 1

    def __init__(self) -> None:
        super().__init__()
        self.converted = 0

    @classmethod
    def upgrade_from(cls, previous: Any) -> PatientV2:
        new = cls()
        new.padded, new.outcome = previous.padded, previous.outcome
        new.converted = 1
        return new


def test_the_new_versions_first_checkpoint_holds_the_converted_state() -> None:
    ic = InMemoryCoordinator(Engine(Patient, "patient"))
    ic.first_start()  # on_first_start awaits a call nobody answers
    _pad(ic, 0)
    old = ic.take_checkpoint()
    upgrading = InMemoryCoordinator(Engine(Patient, "patient", upgrade_to=PatientV2))
    upgrading.recover(old, [], primary=False)
    upgrading.feed(encode_control_record(_COMMIT_ID, UpgradeTakeCheckpoint()))
    assert upgrading.instance.converted == 1 and not upgrading.engine.quiescent
    new = upgrading.checkpoint
    recovered = InMemoryCoordinator(Engine(PatientV2, "patient"))
    recovered.recover(new, [])
    assert (recovered.instance.converted, recovered.instance.padded) == (1, 1)
    assert not recovered.engine.quiescent  # the await is suspended again
