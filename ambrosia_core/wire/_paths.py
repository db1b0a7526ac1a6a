"""Which fast paths the decoders use: the compiled ones (``_cfast``) or the pure ones (``_fast``).

Both give the same results on every input (``tests/wire/test_compiled.py``); the compiled
ones are built at install when Cython and a C compiler are there. ``AMBROSIA_PY_CODEC``
chooses, once, at import: ``auto`` (the default: compiled if built), ``pure``, or
``compiled`` (refuse to start without it; CI uses it so a broken build cannot pass as the
pure path).
"""

from __future__ import annotations

import os
from types import ModuleType

from ..errors import CodecChoiceError
from . import _fast

__all__ = ["CODEC", "incoming_frame_count", "incoming_records", "incoming_rpcs", "long_zz32",
           "outgoing_frames", "outgoing_rpcs", "stored_as_wire", "stored_spans"]


_FUNCTIONS = ("incoming_frame_count", "incoming_records", "incoming_rpcs", "long_zz32",
              "outgoing_frames", "outgoing_rpcs", "stored_as_wire", "stored_spans")


def _choose(choice: str) -> tuple[str, ModuleType]:
    if choice == "pure":
        return "pure", _fast
    if choice not in ("auto", "compiled"):
        raise CodecChoiceError(
            f"AMBROSIA_PY_CODEC={choice!r}: expected auto, pure or compiled"
        )
    try:
        from . import _cfast  # type: ignore[attr-defined]

        missing = [name for name in _FUNCTIONS if not hasattr(_cfast, name)]
        if missing:  # built from an older _cfast.pyx: rebuild it
            raise ImportError(f"the build is out of date, it lacks {', '.join(missing)}")
    except ImportError as err:
        if choice == "compiled":
            raise CodecChoiceError(
                f"AMBROSIA_PY_CODEC=compiled but the compiled codec is not built ({err}); "
                "reinstall with Cython and a C compiler"
            ) from None
        return "pure", _fast
    return "compiled", _cfast


CODEC, _impl = _choose(os.environ.get("AMBROSIA_PY_CODEC", "auto"))
incoming_rpcs = _impl.incoming_rpcs
outgoing_rpcs = _impl.outgoing_rpcs
long_zz32 = _impl.long_zz32
incoming_records = _impl.incoming_records
stored_spans = _impl.stored_spans
stored_as_wire = _impl.stored_as_wire
outgoing_frames = _impl.outgoing_frames
incoming_frame_count = _impl.incoming_frame_count
