"""``python -m torchboost.cli``: the ``torchboost`` command, run as a module."""

import sys

from torchboost.cli import main

sys.exit(main())
