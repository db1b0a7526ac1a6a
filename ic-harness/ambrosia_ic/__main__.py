"""``python -m ambrosia_ic``: the coordinator's own commands (``ambrosia`` without ``run``
and without method names in ``log dump``; those need the binding, see ``ambrosia_cli``)."""

import sys

from .cli import main

sys.exit(main())
