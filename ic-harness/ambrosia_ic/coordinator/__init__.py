"""The live coordinator, in rooms: ``lifecycle`` holds the ``Coordinator`` and runs it;
the modules beside it each hold one job (see ``lifecycle``'s docstring)."""

from __future__ import annotations

from .lifecycle import Coordinator, LinkOptions, PendingInput
from .phase import TRANSITIONS, Phase
from .process import StandaloneCoordinator
from .reading import EXIT_BINDING_LOST, EXIT_MALFORMED
from .sink import FencedSink, LogSink, StandaloneSink

__all__ = ["EXIT_BINDING_LOST", "EXIT_MALFORMED", "TRANSITIONS", "Coordinator", "FencedSink",
           "LinkOptions", "PendingInput", "LogSink", "Phase", "StandaloneCoordinator",
           "StandaloneSink"]
