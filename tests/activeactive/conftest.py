"""Active/active tests share the coordinator tests' harness."""

from tests.ic.conftest import harness  # noqa: F401 - a fixture, used by name
