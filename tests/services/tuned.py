"""A shipped command run with some of its tuning constants changed, for a test that
cannot wait for the defaults (a reconnect cap of 5 s, a HELLO timeout of 5 s):

    python -m tests.services.tuned MODULE [MODULE.NAME=VALUE ...] -- ARGS

runs ``MODULE.main(ARGS)`` after setting each ``NAME`` of its module to ``VALUE`` (read as
the constant's own type). The constants are not options: no user has a reason to turn them.
"""

from __future__ import annotations

import importlib
import sys


def main() -> int:
    split = sys.argv.index("--")
    target, *settings = sys.argv[1:split]
    for setting in settings:
        where, _, value = setting.partition("=")
        module_name, _, name = where.rpartition(".")
        module = importlib.import_module(module_name)
        old = getattr(module, name)  # a typo is an AttributeError, not a silent no-op
        setattr(module, name, type(old)(value))
    return int(importlib.import_module(target).main(sys.argv[split + 1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
