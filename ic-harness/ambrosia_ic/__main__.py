"""``python -m ambrosia_ic`` is the ``ambrosia`` command."""

import sys

from .cli import main

sys.exit(main())
