from tests.framework.conftest import Launcher, launcher

__all__ = ["Launcher", "launcher"]
