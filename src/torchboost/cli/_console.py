"""The consoles the sub-commands print to: wrapped to the terminal, or full lines elsewhere.

Sent to a file or a pipe (a CI log, ``| tee``) rich would wrap every line at 80 columns;
there a line of torchboost's output stays whole, so a setting, a path or a command can
be copied from the log as it is.
"""

from __future__ import annotations

from typing import IO

from rich.console import Console

__all__ = ["console"]


def console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A Console on stdout (stderr with ``stderr``, or ``file``) that wraps only on a terminal."""
    out = Console(stderr=stderr, file=file)
    out.soft_wrap = not out.is_terminal
    return out
