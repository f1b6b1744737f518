"""``python -m hybrid_cli``: the ``hybrid`` command."""

import sys

from hybrid_cli import main

sys.exit(main())
