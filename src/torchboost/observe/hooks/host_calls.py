"""The host's calls outside the loop's phases, timed: checkpoint writes and output.

What is touched, and why each is the least invasive way to see it:

* ``torch.save`` (``torch.serialization.save`` is the same function) and, where installed,
  ``safetensors.torch.save_file``: a checkpoint write; its bytes are the file's size after
  it, or how far a file object's position moved (a ``BytesIO``);
* ``builtins.print``: printing, the formatting of its arguments included (``print(loss)``
  formats a tensor);
* ``logging.Handler.handle``: a logging record, formatted and emitted, by any handler (a
  ``StreamHandler``, a ``FileHandler``);
* ``sys.stdout`` and ``sys.stderr``: each replaced by a stand-in that times ``write``,
  ``writelines`` and ``flush`` and hands everything else to the stream (``fileno``,
  ``isatty``, ``encoding``...): what writes to them directly, a progress bar (tqdm writes
  to stderr), warnings.

A call counts only when the step owns it (:meth:`HostLog.open`): in the thread
that installed the observer (the script's), outside every phase (a print inside a module's
forward stays forward's, one in a Dataset's ``__getitem__`` the data wait's), outside
evaluation and torchboost's own work at a step boundary, and not within another call
counted (print's writes are print's). A save in a thread of its own (the fix for a slow
one) is not the step's, and is not counted.

On a step timed on the device (CUDA), a save, or a print or logging record holding a CUDA
tensor, would wait for the device's queued work: that wait is taken first, untimed
(:meth:`HostLog.drain`), so the call is timed for itself and not for device work the
phases' events already hold. Blocking reads from the device (``.item()``, ``.cpu()``) are
not timed: on a CPU they cost nothing; on CUDA their wait is that same device work, and the
profiler window counts them (``sync.host_device``).

``uninstall`` puts every attribute back; one the script replaced itself meanwhile (its own
``sys.stdout``) is left as the script set it, and a stand-in still held somewhere (a
logging handler made during the run) passes every call straight through once uninstalled.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import logging
import os
import sys
import threading
import time
from typing import Any, Callable, Iterable

import torch
import torch.serialization

from torchboost.observe.record.phases import CHECKPOINT, OUTPUT
from torchboost.observe.record.recorder import StepRecorder

__all__ = ["HostCalls", "HOST_ATTRIBUTES", "TimedStream"]

HOST_ATTRIBUTES: tuple[tuple[Any, str], ...] = (
    (torch, "save"), (torch.serialization, "save"), (builtins, "print"), (logging.Handler, "handle"),
    (sys, "stdout"), (sys, "stderr"),
)
"""(owner, attribute) pairs replaced while installed and put back by ``uninstall``
(and ``safetensors.torch.save_file`` where safetensors is installed)."""

_OPTIONAL_SAVERS = ("safetensors.torch",)


class TimedStream:
    """``sys.stdout`` or ``sys.stderr`` while the observer is installed: ``write``,
    ``writelines`` and ``flush`` timed as output, everything else the stream's own."""

    def __init__(self, stream: Any, calls: "HostCalls") -> None:
        self._stream = stream
        self._calls = calls

    def write(self, text: str) -> Any:
        """The stream's ``write``, timed."""
        return self._calls.output(self._stream.write, text)

    def writelines(self, lines: Iterable[str]) -> Any:
        """The stream's ``writelines``, timed."""
        return self._calls.output(self._stream.writelines, lines)

    def flush(self) -> Any:
        """The stream's ``flush``, timed."""
        return self._calls.output(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        if name in ("_stream", "_calls"):  # a copy made without __init__ has neither
            raise AttributeError(name)
        return getattr(self._stream, name)


class HostCalls:
    """Times checkpoint writes and output for ``recorder``; ``uninstall`` undoes all (see the
    module docstring). Installed and taken off by :class:`~torchboost.observe.hooks.instrument.Instrumentation`."""

    def __init__(self, recorder: StepRecorder, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.recorder = recorder
        self._clock = clock
        self._saved: list[tuple[Any, str, Any, Any]] = []  # owner, name, original, ours
        self._thread: int | None = None
        self._busy = False  # a counted call is running: calls within it are its own
        self.active = False
        """Between ``install()`` and ``uninstall()``: stand-ins held after it pass calls through."""

    def install(self) -> "HostCalls":
        """Wrap the savers and printers and put the stand-ins in place."""
        self._thread, self.active = threading.get_ident(), True
        wrappers: dict[int, Any] = {}  # one wrapper per function: torch.serialization.save is torch.save
        for owner, name, wrap in self._targets():
            original = getattr(owner, name)
            if id(original) not in wrappers:
                wrappers[id(original)] = functools.wraps(original)(wrap(original))
            self._replace(owner, name, wrappers[id(original)])
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None:
                self._replace(sys, name, TimedStream(stream, self))
        return self

    def uninstall(self) -> None:
        """Put back every attribute still ours; safe to call twice."""
        self.active = False
        for owner, name, original, ours in reversed(self._saved):
            if getattr(owner, name, None) is ours:
                setattr(owner, name, original)
        self._saved = []

    def _replace(self, owner: Any, name: str, ours: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name), ours))
        setattr(owner, name, ours)

    def _targets(self) -> list[tuple[Any, str, Callable[[Any], Any]]]:
        found = [(torch, "save", self._saver(1, "f")), (torch.serialization, "save", self._saver(1, "f")),
                 (builtins, "print", self._printer), (logging.Handler, "handle", self._handler)]
        for module_name in _OPTIONAL_SAVERS:
            try:
                module = importlib.import_module(module_name)
            except ImportError:  # not installed: nothing can call it
                continue
            found.append((module, "save_file", self._saver(1, "filename")))
        return found

    # -- the one path every counted call takes --------------------------------------------
    def counts(self) -> bool:
        """A call now is one to time: not traced by ``torch.compile`` (which then sees the
        original call, as without us), installed, in the script's thread, not within another
        counted call, and one the step owns."""
        return (not torch.compiler.is_compiling() and self.active and not self._busy
                and threading.get_ident() == self._thread and self.recorder.host.open())

    def output(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)``, timed as output when it :meth:`counts`."""
        if not self.counts():
            return call(*args, **kwargs)
        return self._timed(OUTPUT, None, call, *args, **kwargs)

    def _timed(self, phase: int, target: Any, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a counted call of ``phase``; ``target``: a save's file (its bytes are noted)."""
        log = self.recorder.host
        self._busy = True
        try:
            before = _position(target) if phase == CHECKPOINT else None
            log.begin(phase)
            start = self._clock()
            try:
                return call(*args, **kwargs)
            finally:
                ms = (self._clock() - start) * 1000.0
                log.end(phase, ms, _written(target, before) if phase == CHECKPOINT else None)
        finally:
            self._busy = False

    # -- the wrappers ---------------------------------------------------------------------
    def _saver(self, index: int, name: str) -> Callable[[Any], Any]:
        """A wrapper for a save function whose argument ``index`` (or keyword ``name``) is its file."""
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def save(*args: Any, **kwargs: Any) -> Any:
                if not self.counts():
                    return original(*args, **kwargs)
                self.recorder.host.drain()  # a save of CUDA tensors copies them out: it waits anyway
                target = args[index] if len(args) > index else kwargs.get(name)
                return self._timed(CHECKPOINT, target, original, *args, **kwargs)

            return save

        return wrap

    def _printer(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def print(*args: Any, **kwargs: Any) -> Any:
            if not self.counts():
                return original(*args, **kwargs)
            self.recorder.host.drain(lambda: _holds_cuda_tensor(args))
            return self._timed(OUTPUT, None, original, *args, **kwargs)

        return print

    def _handler(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def handle(handler: logging.Handler, record: logging.LogRecord) -> Any:
            if not self.counts():
                return original(handler, record)
            self.recorder.host.drain(lambda: _holds_cuda_tensor(_record_values(record)))
            return self._timed(OUTPUT, None, original, handler, record)

        return handle


def _holds_cuda_tensor(values: Iterable[Any]) -> bool:
    """Any of ``values`` is a CUDA tensor (formatting it waits for the device)."""
    return any(isinstance(v, torch.Tensor) and v.is_cuda for v in values)


def _record_values(record: logging.LogRecord) -> list[Any]:
    """What formatting ``record`` formats: its message and its arguments."""
    args = record.args
    values = list(args.values()) if isinstance(args, dict) else list(args or ())
    return [record.msg, *values]


def _is_path(target: Any) -> bool:
    return isinstance(target, (str, bytes, os.PathLike))


def _position(target: Any) -> int | None:
    """A file object's position before a save (None for a path, or when it has none)."""
    if target is None or _is_path(target):
        return None
    try:
        return int(target.tell())
    except Exception:  # noqa: BLE001 - not seekable: its bytes stay unknown
        return None


def _written(target: Any, before: int | None) -> int | None:
    """Bytes a save wrote: the file's size for a path, the position's move for a file object."""
    try:
        if _is_path(target):
            return os.path.getsize(target)
        return int(target.tell()) - before if before is not None else None
    except Exception:  # noqa: BLE001 - a file gone or closed: its bytes stay unknown
        return None
