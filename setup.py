"""The optional compiled codec: ``ambrosia_core.wire._cfast``, built from Cython with the
machine's C compiler. Everything else is in pyproject.toml.

Without Cython, or when the compiler fails, the install goes on without the extension
(one warning line) and the decoders use the pure-Python fast paths, which give the same
results. ``AMBROSIA_PY_CODEC=compiled`` makes a missing extension an error at import.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Builds the codec if it can; a failure is a warning, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # any compiler failure leaves the pure path
            print(f"warning: the compiled codec was not built ({err}); "
                  "the pure-Python codec will be used", file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # as above
            print(f"warning: {ext.name} was not built ({err}); "
                  "the pure-Python codec will be used", file=sys.stderr)


def _extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("warning: Cython is missing; the compiled codec is not built", file=sys.stderr)
        return []
    return cythonize(
        [Extension("ambrosia_core.wire._cfast", ["ambrosia_core/wire/_cfast.pyx"])],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
