"""KCL multi-lang record processors hosted on the connector coordinator's streams: the
protocol without I/O (``protocol``), the state the immortal keeps for them (``core``),
the primary's child-process driver (``driver``) and the immortal (``KclCoordinator``).
See the README beside this package."""

from .config import ProcessorConfig, ProcessorConfigError, processors_from_config
from .core import KclCore, ProcessorRecord
from .immortal import KclCoordinator
from .protocol import ChildSession, KclRecord, Protocol

__all__ = ["ChildSession", "KclCoordinator", "KclCore", "ProcessorConfig",
           "ProcessorConfigError", "ProcessorRecord", "Protocol", "KclRecord",
           "processors_from_config"]
