"""The framework tests drive engines with the public in-memory coordinator."""

from __future__ import annotations

from ambrosia_py.testing.inmemory import InMemoryCoordinator as FakeCoordinator

__all__ = ["FakeCoordinator"]
