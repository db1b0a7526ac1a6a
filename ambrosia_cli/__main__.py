"""``python -m ambrosia_cli`` is the ``ambrosia`` command."""

import sys

from .main import main

sys.exit(main())
