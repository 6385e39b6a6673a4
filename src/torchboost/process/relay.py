"""Copying a child's output: stdout and stderr to ours, stderr's tail kept.

The profiler's own lines (``USDT: ... profiler_start`` from Kineto, written straight to
file descriptor 2 of every rank) are taken out of the terminal copy and the tail, and
appended to ``profiler.log`` in the report folder, so they do not print through the
progress display. A loop observed in the user's own process (a notebook's cell, which
shows what is written to its descriptors 1 and 2) has no parent to relay it: there
:func:`profiler_lines_to` holds the descriptors around each call of the profiler, and
sorts its lines out the same way.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Callable, Iterator

__all__ = ["PROFILER_LOG", "TAIL_CHARS", "NoiseFilter", "profiler_lines_to", "split_noise", "start_relays"]

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
    """Threads copying the child's stderr (kept in ``tail``) and, with ``echo``, its stdout;
    the profiler's lines go to ``noise_log`` from either (a wrapper's ``2>&1 | tee log``
    sends the script's stderr down its stdout)."""
    err = (lambda: sys.stderr) if echo else None
    relays = [threading.Thread(target=_relay, args=(proc.stderr, err, tail, noise_log), daemon=True)]
    if echo:
        relays.append(threading.Thread(target=_relay, args=(proc.stdout, stdout or (lambda: sys.stdout), None,
                                                            noise_log), daemon=True))
    for relay in relays:
        relay.start()
    return relays


def _relay(pipe: IO[bytes], stream: Callable[[], IO[str]] | None, tail: collections.deque[str] | None,
           noise_log: Path | None = None) -> None:
    # The stream is looked up per chunk: a live progress display swaps sys.stderr.
    # With no stream the text is only kept in the tail (quiet tuning trials). With a
    # noise log, text goes on by whole lines (see NoiseFilter) and the profiler's lines
    # go to the log instead. The work per chunk is bounded by the chunk's size, however
    # long a line is: the GIL is soon free again for the main thread's signal handlers.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    lines = NoiseFilter(noise_log) if noise_log is not None else None
    fd = pipe.fileno()
    kept = [0]
    while True:
        chunk = os.read(fd, _CHUNK_BYTES)
        text = decoder.decode(chunk, final=not chunk)
        if lines is not None:
            text = lines.feed(text, final=not chunk)
        if text:
            _deliver(text, stream, tail, kept)
        if not chunk:
            pipe.close()
            return


_CHUNK_BYTES = 65536
_PIECE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)")


class NoiseFilter:
    """Takes the profiler's lines out of a stream of text, given in pieces of any size.

    Text goes on by whole lines (a "\r" ends one too, so progress bars still move). An
    unfinished line is held back only while it is short: one longer than
    :data:`MAX_LINE_CHARS` is passed on as it comes, unscanned (the profiler's lines are
    short), so the text held and the text scanned never grow with a line's length.
    """

    MAX_LINE_CHARS = 4096
    """The longest line held back and scanned for the profiler's messages."""

    def __init__(self, noise_log: Path) -> None:
        self._log = noise_log
        self._held = ""  # the unfinished last line, at most MAX_LINE_CHARS
        self._in_long_line = False  # passing a long line on until its end

    @property
    def held_chars(self) -> int:
        """Characters held back now, waiting for their line's end."""
        return len(self._held)

    def feed(self, text: str, *, final: bool) -> str:
        """What of ``text`` (after what came before) may be shown now, without the
        profiler's messages; ``final`` gives out everything still held."""
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1  # the end of the last whole line
        shown: list[str] = []
        done, rest = text[:cut], text[cut:]
        if self._in_long_line:  # the rest of a long line, up to its end, goes on unscanned
            head = _PIECE.match(done) if done else None
            if head is None:
                return text
            shown.append(head.group(0))
            done, self._in_long_line = done[head.end():], False
        if done:
            noise = self._scan(self._held + done, shown)
        else:  # no line ended: the held line goes on
            noise, rest = [], self._held + rest
        self._held = ""
        if final:
            noise += self._scan(rest, shown)
        elif len(rest) > self.MAX_LINE_CHARS:
            shown.append(rest)
            self._in_long_line = True
        else:
            self._held = rest
        if noise:
            with contextlib.suppress(OSError), open(self._log, "a", encoding="utf-8") as fh:
                fh.write("\n".join(noise) + "\n")  # a full disk loses these lines, never the relay
        return "".join(shown)

    def _scan(self, text: str, shown: list[str]) -> list[str]:
        """Append ``text``'s lines to ``shown`` less the profiler's messages; returns those."""
        noise: list[str] = []
        for line in _PIECE.findall(text) or ([text] if text else []):
            if len(line) > self.MAX_LINE_CHARS:
                shown.append(line)
                continue
            kept, found = split_noise(line)
            shown.append(kept)
            noise += found
        return noise


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


@contextlib.contextmanager
def profiler_lines_to(noise_log: Path) -> Iterator[None]:
    """Around a call of the profiler in this very process: what is written meanwhile to file
    descriptors 1 and 2 (Kineto writes its lines there from C++, under ``sys.stdout`` and
    ``sys.stderr``) is held in temporary files; after, the profiler's lines are appended to
    ``noise_log`` and the rest is written on to its own descriptor. A descriptor that is
    not open, or cannot be held (no room for a temporary file), is left as it is."""
    _flush_streams()
    held = [h for h in map(_hold, (1, 2)) if h is not None]
    try:
        yield
    finally:
        _flush_streams()
        for fd, copy, spool in held:
            os.dup2(copy, fd)
            os.close(copy)
            with spool:
                spool.seek(0)
                text = spool.read().decode("utf-8", errors="replace")
            rest = NoiseFilter(noise_log).feed(text, final=True).encode("utf-8")
            with contextlib.suppress(OSError):  # a closed reader loses the text, never the profiler's call
                while rest:
                    rest = rest[os.write(fd, rest):]


def _hold(fd: int) -> tuple[int, int, IO[bytes]] | None:
    """Descriptor ``fd`` pointed at a new temporary file: (``fd``, a copy of it as it was,
    the file); None when it could not be."""
    try:
        spool = tempfile.TemporaryFile()
    except OSError:
        return None
    try:
        copy = os.dup(fd)
    except OSError:
        spool.close()
        return None
    try:
        os.dup2(spool.fileno(), fd)
    except OSError:
        os.close(copy)
        spool.close()
        return None
    return fd, copy, spool


def _flush_streams() -> None:
    """Python's and C's buffered output, written out to the descriptors they are on now."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):  # no C library to name (Windows): Kineto's lines are unbuffered
        ctypes.CDLL(None).fflush(None)
