"""The debug switches as the running script left them: :class:`DebugFacts` and its probe.

Read once, at the end of the warm-up, from the live process (the doctor's profiler
window comes after it, so the profiler read is the script's own), each where torch or
Python holds it: autograd's anomaly mode, the autograd profiler, the interpreter's trace
and profile functions, torch's deterministic switches, Python's dev mode, the loggers
torch's ``TORCH_LOGS`` set, and the variables torch reads from the environment
(``CUDA_LAUNCH_BLOCKING``, ``TORCH_SHOW_CPP_STACKTRACES``). Where the script's own files
on the call stack (and its ``__main__``) hold the line that turned one on, that line is
kept too (:func:`script_line`), so a finding can name it; the files are read, never
written.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

import torch

from torchboost.reach import frames
from torchboost.techniques.registry import ProbeContext

__all__ = ["DebugFacts", "LINE_PATTERNS", "probe_debug", "script_line"]

TORCH_LOGS = "TORCH_LOGS"
LAUNCH_BLOCKING = "CUDA_LAUNCH_BLOCKING"
CPP_STACKTRACES = "TORCH_SHOW_CPP_STACKTRACES"
DEV_MODE = "PYTHONDEVMODE"


@dataclass(frozen=True)
class DebugFacts:
    """Debugging switches the script left on, as read at the end of its warm-up."""

    technique: ClassVar[str] = "debug"

    anomaly: bool = False
    """``torch.is_anomaly_enabled()``: autograd's anomaly detection
    (``torch.autograd.set_detect_anomaly(True)`` or a ``detect_anomaly()`` block)."""
    anomaly_check_nan: bool = False
    """``torch.is_anomaly_check_nan_enabled()`` while anomaly detection is on: every
    backward function's outputs are checked for NaN."""
    profiler: str = ""
    """The autograd profiler the script left running, by torch's name for it ("kineto":
    ``torch.profiler.profile`` or ``torch.autograd.profiler.profile``; "nvtx":
    ``emit_nvtx``; "itt": ``emit_itt``); "": none."""
    tracer: str = ""
    """The interpreter's trace or profile function (``sys.gettrace()``, ``sys.getprofile()``)
    by its module and name ("coverage.CTracer", "bdb.Bdb.trace_dispatch"): a debugger's or a
    coverage tool's; "": none."""
    launch_blocking: bool = False
    """``CUDA_LAUNCH_BLOCKING=1`` in the script's environment: every CUDA kernel launch waits
    for the kernel to finish."""
    deterministic: bool = False
    """``torch.are_deterministic_algorithms_enabled()``
    (``torch.use_deterministic_algorithms(True)``)."""
    cudnn_deterministic: bool = False
    """``torch.backends.cudnn.deterministic``."""
    cpp_stacktraces: bool = False
    """``TORCH_SHOW_CPP_STACKTRACES=1``: every error torch raises collects its C++ stack."""
    dev_mode: str = ""
    """How Python's dev mode is on (``sys.flags.dev_mode``): "-X dev" or "PYTHONDEVMODE";
    "": off."""
    torch_logs: str = ""
    """``TORCH_LOGS`` as set, else the torch loggers set below WARNING
    (``torch._logging.set_logs``), in words; "": neither."""
    lines: dict[str, str] = field(default_factory=dict)
    """Each switch's line in the script's own files, by the field's name
    (``{"anomaly": "train.py line 3: torch.autograd.set_detect_anomaly(True)"}``)."""


LINE_PATTERNS: dict[str, str] = {
    "anomaly": (r"\bset_detect_anomaly\s*\((?!\s*(False|mode\s*=\s*False))|(?<!set_)\bdetect_anomaly\s*\("
                r"|\bdetect_anomaly\s*=\s*True"),  # the call, the context manager, Lightning's flag
    "profiler": r"\bprofiler\.profile\s*\(|\bemit_(nvtx|itt)\s*\(",
    "tracer": r"\b(pdb|ipdb|pudb)\.set_trace\s*\(|\bbreakpoint\s*\(|\bset(trace|profile)\s*\(",
    "launch_blocking": LAUNCH_BLOCKING,
    "deterministic": r"\buse_deterministic_algorithms\s*\((?!\s*False)",
    "cudnn_deterministic": r"\bcudnn\.deterministic\s*=\s*True",
    "cpp_stacktraces": CPP_STACKTRACES,
    "dev_mode": DEV_MODE,
    "torch_logs": rf"{TORCH_LOGS}|\bset_logs\s*\(",
}
"""What the line that turns each switch on looks like in a script (a regular expression)."""


def _script_files() -> Iterator[str]:
    """The script's own source files: its ``__main__``, then those of its frames on the stack."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if isinstance(main, str):
        yield main
    frame = sys._getframe(1)
    while frame is not None:
        if frames.is_script_frame(frame):
            yield frame.f_code.co_filename
        frame = frame.f_back


def script_line(pattern: str, files: Iterator[str] | None = None) -> str:
    """The first line of the script's own files that matches ``pattern`` and is not a
    comment, in words ("train.py line 3: torch.autograd.set_detect_anomaly(True)"); "":
    none (the switch was set elsewhere: a library, the shell)."""
    seen: set[str] = set()
    for path in files if files is not None else _script_files():
        if path in seen or not path.endswith(".py"):
            continue
        seen.add(path)
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read(1 << 20)  # a script, not a data file: its first MiB
        except OSError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            code = line.split("#", 1)[0].strip()
            if code and re.search(pattern, code):
                return f"{os.path.basename(path)} line {number}: {code}"
    return ""


def _who(function: Any) -> str:
    """A trace or profile function in words: its module and name."""
    owner = getattr(function, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):  # a bound method: pdb's Bdb.trace_dispatch
        return f"{type(owner).__module__}.{getattr(function, '__qualname__', type(owner).__qualname__)}"
    if hasattr(function, "__qualname__"):  # a function
        return f"{getattr(function, '__module__', None) or '?'}.{function.__qualname__}"
    return f"{type(function).__module__}.{type(function).__qualname__}"  # a callable object: coverage's CTracer


def _tracer() -> str:
    """The trace or profile function of this thread in words, leaving out torchboost's own."""
    found = [f for f in (sys.gettrace(), sys.getprofile()) if f is not None]
    named = [_who(f) for f in found]
    return ", ".join(dict.fromkeys(n for n in named if not n.startswith("torchboost.")))


def _profiler() -> str:
    autograd = torch._C._autograd
    if not getattr(autograd, "_profiler_enabled", lambda: False)():
        return ""
    kind = getattr(autograd, "_profiler_type", lambda: None)()
    return str(getattr(kind, "name", "") or "on").lower()


def _torch_logs() -> str:
    """``TORCH_LOGS`` as set, else torch's loggers set below WARNING, in words."""
    if os.environ.get(TORCH_LOGS, "").strip():
        return f"{TORCH_LOGS}={os.environ[TORCH_LOGS].strip()}"
    # torch.__trace is torch's own structured-trace logger: at DEBUG always, written only
    # where TORCH_TRACE names a folder.
    verbose = sorted(name for name, logger in list(logging.Logger.manager.loggerDict.items())
                     if (name == "torch" or name.startswith("torch.")) and ".__" not in name
                     and isinstance(logger, logging.Logger) and logging.NOTSET < logger.level < logging.WARNING)
    if not verbose:
        return ""
    more = f" and {len(verbose) - 3} more" if len(verbose) > 3 else ""
    return f"{', '.join(verbose[:3])}{more} below WARNING"


def _dev_mode() -> str:
    if not sys.flags.dev_mode:
        return ""
    return "-X dev" if "dev" in getattr(sys, "_xoptions", {}) else DEV_MODE


def probe_debug(ctx: ProbeContext) -> DebugFacts:
    """Read every debug switch in the live process (see the module docstring); the line that
    turned each one on where the script's files hold it."""
    read = DebugFacts(
        anomaly=torch.is_anomaly_enabled(),
        anomaly_check_nan=torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled(),
        profiler=_profiler(),
        tracer=_tracer(),
        launch_blocking=os.environ.get(LAUNCH_BLOCKING, "").strip() == "1",  # torch takes "1" alone
        deterministic=torch.are_deterministic_algorithms_enabled(),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        cpp_stacktraces=os.environ.get(CPP_STACKTRACES, "").strip() == "1",
        dev_mode=_dev_mode(),
        torch_logs=_torch_logs(),
    )
    on = [name for name in LINE_PATTERNS if getattr(read, name)]
    lines = {name: line for name in on if (line := script_line(LINE_PATTERNS[name]))}
    return DebugFacts(**{**read.__dict__, "lines": lines})
