"""The optional compiled fast paths, built from Cython with the machine's C compiler: the
wire codec's (``ambrosia_core.wire._cfast``) and the log store's
(``ambrosia_ic.logstore._cfast``). Everything else is in pyproject.toml.

Without Cython, or when the compiler fails, the install goes on without the extensions
(one warning line each) and the pure-Python fast paths are used, which give the same
results. ``AMBROSIA_PY_CODEC=compiled`` makes a missing extension an error at import.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Builds the extensions if it can; a failure is a warning, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # any compiler failure leaves the pure path
            print(f"warning: the compiled fast paths were not built ({err}); "
                  "the pure-Python ones will be used", file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # as above
            print(f"warning: {ext.name} was not built ({err}); "
                  "the pure-Python fast paths will be used", file=sys.stderr)


def _extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("warning: Cython is missing; the compiled fast paths are not built",
              file=sys.stderr)
        return []
    return cythonize(
        [Extension("ambrosia_core.wire._cfast", ["ambrosia_core/wire/_cfast.pyx"]),
         Extension("ambrosia_ic.logstore._cfast",
                   ["ic-harness/ambrosia_ic/logstore/_cfast.pyx"])],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
