"""The exactly-once connector coordinator: an immortal that takes Wallaroo connector
protocol v3 streams from sources and commits output to 2PC sinks exactly once. See the
README beside this package."""

from .config import CoordinatorConfig, CoordinatorConfigError
from .core import FROM_START, Applied, ConnectorCore, SinkRecord, StreamRecord
from .immortal import ConnectorCoordinator

__all__ = ["FROM_START", "Applied", "ConnectorCoordinator", "CoordinatorConfig",
           "CoordinatorConfigError", "ConnectorCore", "SinkRecord", "StreamRecord"]
