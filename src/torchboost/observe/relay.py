"""Copying the observed child's output: stdout and stderr to ours, stderr's tail kept.

The profiler's own lines (``USDT: ... profiler_start`` from Kineto, written straight to
file descriptor 2 of every rank) are taken out of the terminal copy and the tail, and
appended to ``profiler.log`` in the report folder, so they do not print through the
progress display.
"""

from __future__ import annotations

import codecs
import collections
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Callable

__all__ = ["PROFILER_LOG", "TAIL_CHARS", "split_noise", "start_relays"]

TAIL_CHARS = 8000
"""How much of the child's stderr is kept for error messages."""
PROFILER_LOG = "profiler.log"
"""Where the profiler's own stderr lines go, in the report folder."""
_NOISE = re.compile(r"(USDT:|STAGE:)[^\n]*?\] ?(profiler_start|profiler_stop|[A-Za-z ]+ (started|ended|completed))")


def split_noise(line: str) -> tuple[str, list[str]]:
    """``line`` without the profiler's messages, and those messages."""
    found = [m.group(0) for m in _NOISE.finditer(line)]
    if not found:
        return line, []
    rest = _NOISE.sub("", line)
    return ("" if not rest.strip() else rest), found


def start_relays(proc: subprocess.Popen, tail: collections.deque[str], *, echo: bool,
                 stdout: Callable[[], IO[str]] | None, noise_log: Path | None = None) -> list[threading.Thread]:
    """Threads copying the child's stderr (kept in ``tail``; the profiler's lines to
    ``noise_log``) and, with ``echo``, its stdout."""
    err = (lambda: sys.stderr) if echo else None
    relays = [threading.Thread(target=_relay, args=(proc.stderr, err, tail, noise_log), daemon=True)]
    if echo:
        relays.append(threading.Thread(target=_relay, args=(proc.stdout, stdout or (lambda: sys.stdout), None),
                                       daemon=True))
    for relay in relays:
        relay.start()
    return relays


def _relay(pipe: IO[bytes], stream: Callable[[], IO[str]] | None, tail: collections.deque[str] | None,
           noise_log: Path | None = None) -> None:
    # The stream is looked up per chunk: a live progress display swaps sys.stderr.
    # With no stream the text is only kept in the tail (quiet tuning trials). With a
    # noise log, text goes on by whole lines (a "\r" ends one too, so progress bars
    # still move) and the profiler's lines go to the log instead.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fd = pipe.fileno()
    kept, pending = [0], ""
    while True:
        chunk = os.read(fd, 65536)
        text = decoder.decode(chunk, final=not chunk)
        if noise_log is not None:
            text, pending = _without_noise(pending + text, noise_log, final=not chunk)
        if text:
            _deliver(text, stream, tail, kept)
        if not chunk:
            pipe.close()
            return


_PIECE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)")


def _without_noise(text: str, noise_log: Path, *, final: bool) -> tuple[str, str]:
    """(what may be shown now, the unfinished last line to hold back)."""
    end = 0
    shown: list[str] = []
    noise: list[str] = []
    for match in _PIECE.finditer(text):
        end = match.end()
        line, found = split_noise(match.group(0))
        shown.append(line)
        noise += found
    rest = text[end:]
    if final and rest:
        line, found = split_noise(rest)
        shown.append(line)
        noise += found
        rest = ""
    if noise:
        with open(noise_log, "a", encoding="utf-8") as fh:
            fh.write("\n".join(noise) + "\n")
    return "".join(shown), rest


def _deliver(text: str, stream: Callable[[], IO[str]] | None, tail: collections.deque[str] | None,
             kept: list[int]) -> None:
    if stream is not None:
        out = stream()
        out.write(text)
        out.flush()
    if tail is not None:
        tail.append(text)
        kept[0] += len(text)
        while kept[0] - len(tail[0]) >= TAIL_CHARS and len(tail) > 1:
            kept[0] -= len(tail.popleft())
