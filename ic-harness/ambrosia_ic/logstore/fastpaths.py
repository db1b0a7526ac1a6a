"""Which fast paths the log store's scans use: the compiled ones (``_cfast``) or the pure
ones (``_fast``).

Both give the same results on every input (``tests/ic/test_logstore_compiled.py``). The
setting is the wire codec's, ``AMBROSIA_PY_CODEC`` (``auto``, ``pure`` or ``compiled``),
applied once, at import, by the codec's own ``choose_fast_paths``, so the two follow one
rule: ``compiled`` refuses to start without this build too.
"""

from __future__ import annotations

from types import ModuleType

from ambrosia_core.wire.fastpaths import choose_fast_paths

from . import _fast

__all__ = ["CODEC", "stored_as_wire", "stored_spans"]

_FUNCTIONS = ("stored_as_wire", "stored_spans")


def _compiled() -> ModuleType:
    from . import _cfast  # type: ignore[attr-defined]

    return _cfast


CODEC, _impl = choose_fast_paths(_fast, _compiled, _FUNCTIONS,
                                 "the log store's compiled module")
stored_spans = _impl.stored_spans
stored_as_wire = _impl.stored_as_wire
