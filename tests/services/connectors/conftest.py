from tests.launcher import Launcher, launcher
from tests.postgres import PostgresServer, postgres

__all__ = ["Launcher", "PostgresServer", "launcher", "postgres"]
