from tests.launcher import Launcher, launcher

__all__ = ["Launcher", "launcher"]
