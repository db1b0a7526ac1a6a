"""Which fast paths the decoders use: the compiled ones (``_cfast``) or the pure ones (``_fast``).

Both give the same results on every input (``tests/wire/test_compiled.py``); the compiled
ones are built at install when Cython and a C compiler are there. ``AMBROSIA_PY_CODEC``
chooses, once, at import: ``auto`` (the default: compiled if built), ``pure``, or
``compiled`` (refuse to start without it; CI uses it so a broken build cannot pass as the
pure path).

``choose_fast_paths`` applies that choice to any pair of pure and compiled modules, so a
package with fast paths of its own (the coordinator's log store) follows the same choice
as the codec.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from types import ModuleType

from ..errors import CodecChoiceError
from . import _fast

__all__ = ["CODEC", "choose_fast_paths", "incoming_frame_count", "incoming_records",
           "incoming_rpcs", "long_zz32", "outgoing_frames", "outgoing_rpcs"]


_FUNCTIONS = ("incoming_frame_count", "incoming_records", "incoming_rpcs", "long_zz32",
              "outgoing_frames", "outgoing_rpcs")


def choose_fast_paths(pure: ModuleType, load_compiled: Callable[[], ModuleType],
                      functions: Collection[str], what: str = "the compiled codec",
                      choice: str | None = None) -> tuple[str, ModuleType]:
    """The fast paths ``AMBROSIA_PY_CODEC`` asks for: ``("compiled", module)`` from
    ``load_compiled`` or ``("pure", pure)``.

    Args:
        pure: the pure-Python module.
        load_compiled: imports the compiled module (``ImportError`` when it is not built).
        functions: the names the compiled module must have; a build from an older source
            lacks some, and is not taken.
        what: the compiled module in the error's message.
        choice: the choice itself (None: ``AMBROSIA_PY_CODEC``, default ``auto``).

    Raises:
        CodecChoiceError: a choice other than auto, pure or compiled, or ``compiled`` when
            the compiled module is not built or out of date.
    """
    if choice is None:
        choice = os.environ.get("AMBROSIA_PY_CODEC", "auto")
    if choice == "pure":
        return "pure", pure
    if choice not in ("auto", "compiled"):
        raise CodecChoiceError(
            f"AMBROSIA_PY_CODEC={choice!r}: expected auto, pure or compiled"
        )
    try:
        compiled = load_compiled()
        missing = [name for name in functions if not hasattr(compiled, name)]
        if missing:  # built from an older source: rebuild it
            raise ImportError(f"the build is out of date, it lacks {', '.join(missing)}")
    except ImportError as err:
        if choice == "compiled":
            raise CodecChoiceError(
                f"AMBROSIA_PY_CODEC=compiled but {what} is not built ({err}); "
                "reinstall with Cython and a C compiler"
            ) from None
        return "pure", pure
    return "compiled", compiled


def _compiled() -> ModuleType:
    from . import _cfast  # type: ignore[attr-defined]

    return _cfast


CODEC, _impl = choose_fast_paths(_fast, _compiled, _FUNCTIONS)
incoming_rpcs = _impl.incoming_rpcs
outgoing_rpcs = _impl.outgoing_rpcs
long_zz32 = _impl.long_zz32
incoming_records = _impl.incoming_records
outgoing_frames = _impl.outgoing_frames
incoming_frame_count = _impl.incoming_frame_count
