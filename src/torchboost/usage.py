"""The one error for input torchboost cannot use as given: a command, an option, a file.

The CLI catches it, prints its message (which says what to type instead) and exits 2
without a traceback. Low in the tree: whatever reads the user's input raises it.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(ValueError):
    """The command cannot be run as given; the message says what to type instead."""
