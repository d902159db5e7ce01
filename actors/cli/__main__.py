"""``python -m actors.cli``: the ``engram`` command."""

import sys

from actors.cli.main import main

sys.exit(main())
