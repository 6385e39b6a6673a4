"""The consoles the sub-commands print to: wrapped to the terminal, or full lines elsewhere,
each starting on a fresh line.

Sent to a file or a pipe (a CI log, ``| tee``) rich would wrap every line at 80 columns;
there a line of torchboost's output stays whole, so a setting, a path or a command can
be copied from the log as it is.

A script's progress bar (tqdm's, the Hugging Face Trainer's) redraws its line with "\\r"
and ends it only when the bar closes: stopped after its planned steps, the script leaves
the line open. While :func:`line_ends_tracked` is on, what reaches ``sys.stdout`` and
``sys.stderr`` (the script's relayed output) is watched, and a console of
:func:`console` first ends a line the script left open on the same file (the terminal,
or a pipe both streams go to), so torchboost's panel never starts in the middle of a bar.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, Any, Iterator

from rich.console import Console

__all__ = ["console", "line_ends_tracked"]

_OPEN: dict[Any, bool] = {}
"""Per output file: the script's output there left a line open (no newline at its end)."""


def _file_key(stream: Any) -> Any:
    # stdout and stderr on one terminal or one pipe (2>&1) are one file: one line open.
    try:
        info = os.fstat(stream.fileno())
        return (info.st_dev, info.st_ino, info.st_rdev)
    except (AttributeError, OSError, ValueError):  # a StringIO, a closed or detached stream
        return id(stream)


class _Watched:
    """A text stream whose writers (the relays of the script's output) are watched for an
    unended last line; everything else is the stream's own."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._key = _file_key(stream)

    def write(self, text: str) -> int:
        """Write ``text``; note whether it leaves the file's last line open."""
        if text:
            _OPEN[self._key] = not text.endswith("\n")
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _FreshLine:
    """torchboost's own output to ``stream``: it ends a line the script left open first."""

    def __init__(self, stream: IO[str]) -> None:
        # Straight to the file: torchboost's own lines are not the script's (a live
        # display's line is open on purpose), nor text for a live display to redirect.
        stream = getattr(stream, "rich_proxied_file", stream)
        self._stream: IO[str] = stream._stream if isinstance(stream, _Watched) else stream
        self._key = _file_key(self._stream)

    def write(self, text: str) -> int:
        """Write ``text``, after a newline when the script left this file's line open."""
        if text:
            if _OPEN.get(self._key) and not text.startswith("\n"):
                self._stream.write("\n")
            _OPEN[self._key] = False  # rich's own displays manage their line themselves
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def line_ends_tracked() -> Iterator[None]:
    """Watch ``sys.stdout`` and ``sys.stderr`` for lines the script leaves open, until the
    block ends (then the streams are the originals again)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Watched(sys.stdout), _Watched(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A Console on stdout (stderr with ``stderr``, or ``file``) that wraps only on a
    terminal and starts on a fresh line when the script left one open."""
    target = file if file is not None else (sys.stderr if stderr else sys.stdout)
    out = Console(file=_FreshLine(target))  # type: ignore[arg-type]
    out.soft_wrap = not out.is_terminal
    return out
