from tests.ic.conftest import harness
from tests.launcher import Launcher, launcher

__all__ = ["Launcher", "harness", "launcher"]
