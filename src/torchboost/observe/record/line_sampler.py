"""The training thread's Python stack, sampled: the host's time given to the user's lines.

A thread of its own wakes every :data:`INTERVAL_MS`, reads the training thread's current
frame (``sys._current_frames``), and gives the time since its last look to the innermost
frame of the user's own code and the call that frame was making
(:class:`~torchboost.evidence.host_lines.HostLine`), in the phase the recorder says the
step is in (``where()``: "other", "data", "forward", ..., or None: torchboost's own
bookkeeping, not sampled). Samples go to the step in flight, which the recorder keeps or
drops at its boundary (:meth:`LineSampler.close_step`): only recorded steps count.

Why a thread and not the interpreter's hooks: ``sys.setprofile`` calls back on every
Python call and return, and a callback that keeps the stack and its times does work at each
of them, where the sampler's cost is one look an interval whatever the script does (Python
3.11 has no ``sys.monitoring``). Measured (``benchmarks/line_sampler_cost.py``): a look every
10 ms costs the demo's workload and nanoGPT's shakespeare_char shape about 1% a step, every
2 ms about 4%; a profile hook that does nothing at all already 1 to 3%. Reading a frame from
another thread needs the GIL, so a look waits for the training thread to let go of it; the
time is then measured, not assumed (the time since the last look), and a call that holds
the GIL throughout (``gc.collect()``) is seen on its own line right after.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Callable

from torchboost.evidence.host_lines import HostLine

__all__ = ["INTERVAL_MS", "LineSampler", "users_file"]

INTERVAL_MS = 10.0
"""Milliseconds between two looks at the training thread's stack."""
_MAX_DEPTH = 200

Key = tuple[str, str, int, str, str]
"""(bucket, file, line, callee, via) of a sample."""


_TORCHBOOST = os.path.join(str(Path(__file__).resolve().parents[2]), "")


def _library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {os.path.realpath(paths[name]) for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths}
    return tuple(sorted({os.path.join(p, "") for p in found} | {_TORCHBOOST}))


_LIBRARIES = _library_folders()
_KNOWN: dict[str, str | None] = {}


def users_file(filename: str) -> str | None:
    """The absolute path of ``filename`` when its code is the user's own; None for the
    standard library, an installed package, torchboost itself, or no file at all
    (``<frozen ...>``, ``<string>``)."""
    if filename in _KNOWN:
        return _KNOWN[filename]
    real = os.path.realpath(filename) if not filename.startswith("<") else ""
    library = not real or real.startswith(_LIBRARIES) or any(
        f"{os.sep}{name}{os.sep}" in real for name in ("site-packages", "dist-packages"))
    _KNOWN[filename] = None if library else os.path.abspath(filename)
    return _KNOWN[filename]


class LineSampler:
    """Samples one thread's stack into the step in flight (see the module docstring)."""

    def __init__(self, where: Callable[[], str | None], *, interval_ms: float = INTERVAL_MS,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._where = where
        self._interval_s = interval_ms / 1000.0
        self.interval_ms = interval_ms
        self._clock = clock
        self._step: dict[Key, float] = {}
        self._kept: dict[Key, dict[int, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._recording = threading.Event()
        self._thread: threading.Thread | None = None
        self._target: int | None = None
        self._loop: tuple[object, ...] = ()
        self.samples = 0
        """Looks that found the training thread in a phase, over the kept steps."""
        self._step_samples = 0

    def start(self, thread_id: int | None = None) -> "LineSampler":
        """Start sampling ``thread_id`` (the calling thread: the one that trains). Called from
        the training loop (a step's boundary), the innermost frame of the user's code now is
        the loop's (with the user's frames around it: a loop that calls ``train_step()`` each
        step): a sample deeper in the user's code says which of the loop's lines led there."""
        self._target = threading.get_ident() if thread_id is None else thread_id
        self._loop = _loop_codes(sys._getframe(1)) if thread_id is None else ()
        self._recording.set()
        self._thread = threading.Thread(target=self._run, name="torchboost-line-sampler", daemon=True)
        self._thread.start()
        return self

    @property
    def started(self) -> bool:
        """Sampling has started (and not stopped)."""
        return self._thread is not None

    def clear(self) -> None:
        """Forget the kept samples (step counting restarted)."""
        with self._lock:
            self._kept.clear()
            self._step.clear()
            self.samples = self._step_samples = 0

    def close_step(self, index: int, kept: bool, next_recorded: bool) -> None:
        """At a step boundary: the step ``index``'s samples kept (a recorded step) or dropped;
        ``next_recorded``: whether the next step is recorded (sampling pauses until one is)."""
        with self._lock:
            step, self._step = self._step, {}
            samples, self._step_samples = self._step_samples, 0
        if kept:
            self.samples += samples
            for key, ms in step.items():
                self._kept.setdefault(key, {})[index] = ms
        if next_recorded:
            self._recording.set()
        else:
            self._recording.clear()

    def stop(self) -> None:
        """Stop the thread (the step in flight is dropped)."""
        self._stop.set()
        self._recording.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._thread = None

    def lines(self) -> list[HostLine]:
        """The kept samples, one :class:`HostLine` per (bucket, file, line, callee)."""
        return [HostLine(bucket, file, line, linecache.getline(file, line).strip(), callee, dict(by_step), via)
                for (bucket, file, line, callee, via), by_step in sorted(self._kept.items())]

    # -- the sampling thread ------------------------------------------------------------------
    def _run(self) -> None:
        last = self._clock()
        while not self._stop.is_set():
            if not self._recording.is_set():
                self._recording.wait()
                last = self._clock()
                continue
            time.sleep(self._interval_s)
            frame = sys._current_frames().get(self._target)
            now = self._clock()
            bucket = self._where() if self._recording.is_set() else None  # paused meanwhile: not the step's
            if frame is not None and bucket is not None:
                key = _key(bucket, frame, self._loop)
                if key is not None:
                    with self._lock:
                        self._step[key] = self._step.get(key, 0.0) + (now - last) * 1000.0
                        self._step_samples += 1
            last = now
            del frame


def _key(bucket: str, frame: object, loop: tuple[object, ...]) -> Key | None:
    """The sample's key: the innermost frame of the user's code, what it was calling (the
    outermost frame inside it that is not torchboost's own wrapper), and, when that frame is
    not the loop's (``loop``: the codes of the user's frames at a step's boundary), the
    loop's line that led there."""
    callee_frame = None
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        code = frame.f_code  # type: ignore[attr-defined]
        user = users_file(code.co_filename)
        if user is not None:
            via = _via(frame, loop) if code not in loop else ""
            return bucket, user, frame.f_lineno or 0, _name(callee_frame), via  # type: ignore[attr-defined]
        if not code.co_filename.startswith(_TORCHBOOST):
            callee_frame = frame
        frame = frame.f_back  # type: ignore[attr-defined]
        depth += 1
    return None


def _via(frame: object, loop: tuple[object, ...]) -> str:
    """``train.py:12``: the loop's line (the innermost frame whose code is one of ``loop``)
    the user's ``frame`` was called from, outward; "" when the loop is not on the stack."""
    depth = 0
    while loop and frame is not None and depth < _MAX_DEPTH:
        if frame.f_code in loop:  # type: ignore[attr-defined]
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"  # type: ignore[attr-defined]
        frame = frame.f_back  # type: ignore[attr-defined]
        depth += 1
    return ""


def _loop_codes(frame: object | None) -> tuple[object, ...]:
    """The codes of the user's own frames from ``frame`` outward, innermost first: the
    function a step's boundary is reached in (``train_step``) and those that call it (the
    loop in ``main``)."""
    codes: list[object] = []
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        if users_file(frame.f_code.co_filename) is not None:  # type: ignore[attr-defined]
            codes.append(frame.f_code)  # type: ignore[attr-defined]
        frame = frame.f_back  # type: ignore[attr-defined]
        depth += 1
    return tuple(codes)


def _name(frame: object | None) -> str:
    if frame is None:
        return ""
    module = frame.f_globals.get("__name__", "")  # type: ignore[attr-defined]
    qualname = frame.f_code.co_qualname  # type: ignore[attr-defined]
    return f"{module}.{qualname}" if module else qualname
