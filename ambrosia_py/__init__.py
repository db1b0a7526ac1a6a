"""ambrosia-py: immortal services in Python on Microsoft's AMBROSIA protocol.

Subclass ``Immortal``, publish methods with ``@rpc`` / ``@fork`` / ``@impulse``, and run it
with ``ambrosia run MODULE:CLASS --instance-name NAME``.
"""

from .context import ImmortalContext
from .errors import (
    AmbrosiaError,
    ImmortalDefinitionError,
    ImpulseDuringRecoveryError,
    RemoteCallError,
    ReplayDivergenceError,
    SerializationError,
    UnknownMethodError,
    UpgradeError,
)
from .immortal import (
    Immortal,
    ImmortalProxy,
    JsProxy,
    MethodKind,
    PendingCall,
    default_method_id,
    fork,
    gather,
    impulse,
    rpc,
)
from .stopping import StopReason

__version__ = "0.1.0"

__all__ = [
    # The programming model
    "Immortal",
    "rpc",
    "fork",
    "impulse",
    "gather",
    "ImmortalContext",
    "ImmortalProxy",
    "JsProxy",
    "PendingCall",
    "MethodKind",
    "StopReason",
    "default_method_id",
    # Errors users catch
    "AmbrosiaError",
    "ImmortalDefinitionError",
    "ImpulseDuringRecoveryError",
    "RemoteCallError",
    "ReplayDivergenceError",
    "SerializationError",
    "UnknownMethodError",
    "UpgradeError",
    "__version__",
]
