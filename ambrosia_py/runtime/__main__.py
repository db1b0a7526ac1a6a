"""``python -m ambrosia_py.runtime MODULE:CLASS -i NAME --receive-port P --send-port Q``."""

import sys

from .cli import main

sys.exit(main())
