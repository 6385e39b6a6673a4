"""``python -m torchboost``: the ``torchboost`` command, run as a module (where the console
script is not on the PATH, as when the package is found through ``PYTHONPATH``)."""

import sys

from torchboost.cli import main

sys.exit(main())
