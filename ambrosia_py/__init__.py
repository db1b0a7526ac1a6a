"""ambrosia-py: immortal services in Python on Microsoft's AMBROSIA protocol.

Subclass ``Immortal``, publish methods with ``@rpc`` / ``@fork`` / ``@impulse``, and run it
with ``ambrosia run MODULE:CLASS --instance-name NAME``.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ambrosia_core.errors import AmbrosiaError, ReplayDivergenceError
from ambrosia_py.errors import (
    ImmortalDefinitionError,
    ImpulseDuringRecoveryError,
    RemoteCallError,
    SerializationError,
    UnknownMethodError,
    UpgradeError,
)

if TYPE_CHECKING:
    from .context import ImmortalContext
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

# The programming model is loaded on first use, so that a process that needs only a part
# of the package (the coordinator: the wire format, errors, loops) loads only that part.
_LAZY = {
    "ImmortalContext": ".context",
    "Immortal": ".immortal",
    "ImmortalProxy": ".immortal",
    "JsProxy": ".immortal",
    "MethodKind": ".immortal",
    "PendingCall": ".immortal",
    "default_method_id": ".immortal",
    "fork": ".immortal",
    "gather": ".immortal",
    "impulse": ".immortal",
    "rpc": ".immortal",
    "StopReason": ".stopping",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
