"""``python -m ambrosia_py.runtime MODULE:CLASS -i NAME --ic-receive-port P --ic-send-port Q``."""

import sys

from .cli import main

sys.exit(main())
