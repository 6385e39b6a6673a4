"""The observed script gets no stdin: what that means, and how its failure is named.

doctor and tune run the script in a session of its own, away from the terminal, and
give it ``/dev/null`` as stdin: a script that calls ``input()`` (a "continue? [y/N]", a
password prompt) gets ``EOFError`` at once instead of waiting unseen for a terminal it
cannot read (a background process that reads the terminal is stopped by the system).
:func:`stdin_words` names that failure from the script's stderr. ``torchboost run`` runs
the script as python does, stdin included.
"""

from __future__ import annotations

import subprocess

__all__ = ["STDIN", "stdin_words"]

STDIN = subprocess.DEVNULL
"""What the observed script, a tuning trial and an end-to-end run get as stdin."""
_INPUT_AT_EOF = "EOFError: EOF when reading a line"  # input() at the end of its stdin


def stdin_words(stderr_tail: str) -> str | None:
    """Words for a script that failed reading stdin (its last error is ``input()``'s
    EOFError); None when its stderr ends with any other error, or none."""
    lines = [line for line in stderr_tail.strip().splitlines() if line.strip()]
    if not lines or not lines[-1].startswith(_INPUT_AT_EOF):
        return None
    return ("the script tried to read from stdin (input()), which torchboost does not give it: "
            "pass what it asks for as an argument or a file, or run it with torchboost run")
