"""A bounded torch.profiler window driven by the observer's step boundaries.

The window spans a few steps (warm-up then active, via ``torch.profiler.schedule``);
only the active steps reach the op table and the Chrome trace, which keeps the trace
small. Its results are plain :class:`~torchboost.evidence.observed.ProfileFacts`.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from torchboost._disk import no_space_words
from torchboost._intervals import covered, difference, overlap, union
from torchboost.evidence.observed import ProfileFacts
from torchboost.diagnose.gpu import gpu_facts

__all__ = ["ProfileWindow", "Quiet", "SYNC_OPS", "UNLAUNCHED", "collective_time", "phase_times", "step_syncs",
           "summarize_events"]

Quiet = Callable[[], ContextManager[Any]]
"""Where the profiler's own output goes: a context that each call of the profiler runs in."""

SYNC_OPS = (
    "aten::_local_scalar_dense",
    "aten::item",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
)
"""Events that mean the host waited for the device (``aten::item`` calls
``_local_scalar_dense``, so only the latter and the CUDA runtime calls are summed)."""
_COUNTED_SYNCS = tuple(name for name in SYNC_OPS if name != "aten::item")
_COLLECTIVE = re.compile(r"^(gloo|nccl|mpi|ucc):|nccl(Dev)?Kernel", re.IGNORECASE)
"""The collective's own work (gloo's worker threads, NCCL's kernels); the training thread's
``c10d::allreduce_`` only enqueues it."""
_TOP_OPS = 20
_PHASE_MARKS = {"torchboost: data wait": "data", "torchboost: forward": "forward", "torchboost: backward": "backward",
                "torchboost: optimizer": "optimizer"}
"""The observer's marks of the loop's phases in the trace, by the phase each marks."""
_COMPILED = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
"""Ranges around compiled code: its kernels are ops the profiler does not name one by one."""


class ProfileWindow:
    """One profiler window: ``start()`` at a step boundary, ``step()`` at each following one.

    ``step()`` returns True once the window is over; :attr:`facts` then holds the
    result and the trace is at ``trace_path``. Any profiler failure (another profiler
    already running, for one) ends the window with ``facts`` None and ``error`` set,
    so the user's run goes on. Each call of the profiler runs inside ``quiet()``: where
    its own output goes (:func:`~torchboost.process.relay.profiler_lines_to` in the
    user's own process; by default it stays where it is written, for a parent to sort).
    """

    def __init__(self, trace_path: Path, *, warmup: int = 1, active: int = 2, cuda: bool | None = None,
                 quiet: Quiet = contextlib.nullcontext) -> None:
        self.trace_path = Path(trace_path)
        self.warmup = warmup
        self.active = active
        self.cuda = cuda
        self._quiet = quiet
        self.facts: ProfileFacts | None = None
        self.error: str | None = None
        self._prof: profile | None = None
        self._steps = 0
        self._ranges: list[Any] = []  # open record_function annotations, innermost last
        self.gpu: dict[str, Any] | None = None
        """GpuFacts of the window's trace, as a dict, on a CUDA run (None elsewhere)."""

    @property
    def running(self) -> bool:
        """The profiler is recording (between ``start()`` and the end of the window)."""
        return self._prof is not None

    def start(self) -> None:
        """Begin the window at a step boundary."""
        cuda = torch.cuda.is_initialized() if self.cuda is None else self.cuda  # None: if the script uses CUDA
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        try:
            self._prof = profile(
                activities=activities,
                schedule=schedule(wait=0, warmup=self.warmup, active=self.active, repeat=1),
                on_trace_ready=self._ready,
            )
            with self._quiet():
                self._prof.start()
        except Exception as exc:  # noqa: BLE001 - the user's run must go on
            self._fail(exc)

    def annotate(self, name: str) -> None:
        """Open an annotation ``name`` in the trace (a step, a phase) while recording."""
        if self._prof is not None:
            scope = record_function(name)
            scope.__enter__()
            self._ranges.append(scope)

    def end_annotation(self, all_open: bool = False) -> None:
        """Close the innermost open annotation (every one with ``all_open``)."""
        while self._ranges:
            self._ranges.pop().__exit__(None, None, None)
            if not all_open:
                return

    def step(self) -> bool:
        """Mark a step boundary; True when the window has ended."""
        self.end_annotation(all_open=True)
        if self._prof is None:
            return True
        self._steps += 1
        try:
            with self._quiet():  # Kineto starts and stops recording here, and says so
                self._prof.step()
                if self._steps >= self.warmup + self.active:
                    self._prof.stop()
                    self._prof = None
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        return self._prof is None

    def close(self) -> None:
        """Stop a window cut short (script ended or crashed); keeps what is complete."""
        if self._prof is None:
            return
        self.end_annotation(all_open=True)
        prof, self._prof = self._prof, None
        try:
            with self._quiet():
                prof.stop()
        except Exception as exc:  # noqa: BLE001
            self.error = f"profiler stop failed: {exc}"

    def read_gpu(self) -> None:
        """The device's timeline from the written trace, as ``doctor --trace`` reads one."""
        with open(self.trace_path, encoding="utf-8") as fh:
            found = gpu_facts([e for e in json.load(fh).get("traceEvents", []) if isinstance(e, dict)])
        self.gpu = found.to_dict() if found else None

    def _fail(self, exc: BaseException) -> None:
        self.error = f"torch.profiler unavailable: {exc}"
        prof, self._prof = self._prof, None
        if prof is not None:
            try:
                with self._quiet():
                    prof.stop()
            except Exception:  # noqa: BLE001 - already failing; the first error is the one to show
                pass

    def _ready(self, prof: profile) -> None:
        recorded = _recorded_events(prof)
        if recorded is not None and recorded > MAX_READ_EVENTS:
            self.error = (f"the profiler recorded {recorded:,} operations in its {self.active} step(s), more than the "
                          f"{MAX_READ_EVENTS:,} torchboost reads within the bound on its own work at a step boundary: "
                          "no op table and no trace (the step's phases and lines are measured without it)")
            return
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        written = self._export(prof)
        events = prof.events()
        spans = [(e.name, e.thread, e.time_range.start, e.time_range.end) for e in events]
        # The host's events only: Kineto also copies each step's mark onto the device's
        # timeline, where it ends with the step's last kernel, after the host's step.
        on_host = [getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU for e in events]
        host = [span for span, here in zip(spans, on_host) if here]
        self.facts = summarize_events(prof.key_averages(), steps=self.active, syncs=step_syncs(host))
        self.facts.trace_path = self.trace_path.name if written else None
        if self.cuda and written:
            self.read_gpu()
        self.facts.collective_ms_per_step, self.facts.collective_overlap_pct = collective_time(spans, self.active)
        self.facts.phases = phase_times([e for e, here in zip(events, on_host) if here], self.active, _exposed(spans))

    def _export(self, prof: profile) -> bool:
        """Write the trace; False, with the reason in ``error`` and no temporary file left,
        when it could not be written (the profiler only logs its failure)."""
        partial = self.trace_path.with_name(self.trace_path.name + ".tmp")  # where Kineto writes first
        prof.export_chrome_trace(str(self.trace_path))
        if not partial.exists() and self.trace_path.exists():
            return True
        partial.unlink(missing_ok=True)
        try:
            full = shutil.disk_usage(self.trace_path.parent).free < _FULL_BYTES
        except OSError:
            full = False
        self.error = ("the profiler could not write its trace: "
                      + (no_space_words(self.trace_path) if full else f"writing {self.trace_path} failed"))
        return False


MAX_READ_EVENTS = 250_000
"""The most operations a profiled window may hold for the doctor to read them: torch builds a
Python object for each (65 µs apiece on a 2-core EPYC, 184,550 in 12.9 s), twice over with
the op table. A 5 s step of tiny operations held 2 million in two steps, a 515 MB trace whose
reading outlasted the 120 s bound on torchboost's own work, which ended the run."""


def _recorded_events(prof: profile) -> int | None:
    """How many events the stopped profiler holds, counted without reading them (1.2 µs each);
    None where this torch does not say."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    try:
        return len(results.events()) if results is not None else None
    except Exception:  # noqa: BLE001 - unknown: read them as before
        return None


_FULL_BYTES = 1 << 20
"""Less room than this where a trace failed to write: the disk is taken to be full."""


def _collectives_and_compute(spans: list[tuple[str, int, float, float]]) -> tuple[list, list]:
    """The collectives' intervals, and the training thread's ops' (the thread that marks the
    profiler's steps), from ``(name, thread, start_us, end_us)`` events."""
    collectives = [(s, e) for name, _, s, e in spans if _COLLECTIVE.search(name)]
    main = {thread for name, thread, _, _ in spans if name.startswith("ProfilerStep")}
    compute = [(s, e) for name, thread, s, e in spans
               if thread in main and name.startswith("aten::") and not _COLLECTIVE.search(name)]
    return collectives, compute


def collective_time(spans: list[tuple[str, int, float, float]], steps: int) -> tuple[float, float | None]:
    """(collective ms per step, % of it overlapped by compute on the training thread) from
    ``(name, thread, start_us, end_us)`` events; the training thread is the one that
    marks the profiler's steps."""
    collectives, compute = _collectives_and_compute(spans)
    if not collectives or steps <= 0:
        return 0.0, None
    total = covered(collectives)
    return total / 1000.0 / steps, 100.0 * overlap(collectives, compute) / total if total else None


def _exposed(spans: list[tuple[str, int, float, float]]) -> list[tuple[float, float]]:
    """When collectives ran with no op of the training thread beside them (µs intervals)."""
    collectives, compute = _collectives_and_compute(spans)
    return difference(collectives, compute)


def _is_op(name: str) -> bool:
    # aten::, c10d::, autograd::engine::... are ops; a name without "::" is a range around
    # them (DistributedDataParallel.forward, Optimizer.step#SGD.step), its own time Python's.
    return "::" in name or name.startswith(_COMPILED)


def _outer_ops_us(event: Any) -> float:
    """Time of the outermost ops below ``event`` (each branch down to its first op), µs."""
    total, stack = 0.0, list(getattr(event, "cpu_children", ()))
    while stack:
        child = stack.pop()
        if _is_op(child.name):
            total += child.time_range.end - child.time_range.start
        else:
            stack.extend(getattr(child, "cpu_children", ()))
    return total


def phase_times(events: Any, steps: int, exposed: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Each phase the observer marked in the window, and the whole step, ms per step: its
    wall, its outermost ops' time and the ``exposed`` collectives' (µs intervals) within it
    (:attr:`~torchboost.evidence.observed.ProfileFacts.phases`); {} with no step marked."""
    spans: dict[str, list[tuple[float, float]]] = {}
    ops: dict[str, float] = {}
    for event in events:
        phase = "step" if event.name.startswith("ProfilerStep") else _PHASE_MARKS.get(event.name)
        if phase is None:
            continue
        spans.setdefault(phase, []).append((event.time_range.start, event.time_range.end))
        ops[phase] = ops.get(phase, 0.0) + _outer_ops_us(event)
    if "step" not in spans or steps <= 0:
        return {}
    per_step = 1000.0 * steps
    return {phase: {"wall_ms": covered(marked) / per_step, "op_ms": ops[phase] / per_step,
                    "collective_ms": overlap(union(marked), exposed) / per_step}
            for phase, marked in spans.items()}


def step_syncs(spans: list[tuple[str, int, float, float]]) -> dict[str, int] | None:
    """The :data:`SYNC_OPS` events that start within a profiler step, counted by name, from
    the host's ``(name, thread, start_us, end_us)`` events; None when no step is marked. ``torch.profiler``
    syncs the device itself when it stops, after the last step: that sync is none of the script's."""
    steps = [(start, end) for name, _, start, end in spans if name.startswith("ProfilerStep")]
    if not steps:
        return None
    counted: dict[str, int] = {}
    for name, _, start, _ in spans:
        if name in SYNC_OPS and any(low <= start < high for low, high in steps):
            counted[name] = counted.get(name, 0) + 1
    return counted


UNLAUNCHED = "GPU work no op launched"
"""The op table's row for device time no op of the host launched (kernels with no op named)."""


def summarize_events(averages: Any, *, steps: int, syncs: dict[str, int] | None = None,
                     top: int = _TOP_OPS) -> ProfileFacts:
    """Op table and sync counts from ``prof.key_averages()`` over ``steps`` active steps;
    ``syncs``: the sync events counted within the steps (:func:`step_syncs`), else every one
    of ``averages``; ``top``: the rows kept, by time.

    A GPU's time is counted once: a kernel's time is in the self device time of the op that
    launched it, and the kernel's own row beside it (device type CUDA, and the GPU-side
    ranges of record_function) is left out; device time no op accounts for is one row,
    :data:`UNLAUNCHED`."""
    rows = []
    counts: dict[str, int] = {}
    on_device_us = 0.0
    for event in averages:
        name = event.key
        if name in SYNC_OPS:
            counts[name] = counts.get(name, 0) + int(event.count)
        if name.startswith(("ProfilerStep", "torchboost: ")):  # "ProfilerStep#3", our step/phase marks
            continue  # ranges around the ops, not ops
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        if getattr(event, "device_type", DeviceType.CPU) != DeviceType.CPU:
            if not getattr(event, "is_user_annotation", False):
                on_device_us += float(device_us or 0.0)
            continue  # the kernel's time is its launching op's
        rows.append({
            "name": name,
            "self_cpu_ms": float(event.self_cpu_time_total) / 1000.0,
            "self_device_ms": float(device_us or 0.0) / 1000.0,
            "calls": int(event.count),
        })
    unlaunched_ms = (on_device_us / 1000.0) - sum(row["self_device_ms"] for row in rows)
    if unlaunched_ms > 1e-3:
        rows.append({"name": UNLAUNCHED, "self_cpu_ms": 0.0, "self_device_ms": unlaunched_ms, "calls": 0})
    rows.sort(key=lambda r: max(r["self_cpu_ms"], r["self_device_ms"]), reverse=True)
    syncs = counts if syncs is None else syncs
    counted = sum(syncs.get(name, 0) for name in _COUNTED_SYNCS)
    return ProfileFacts(
        steps=steps,
        top_ops=rows[:top],
        sync_count_per_step=counted / steps if steps else 0.0,
        sync_ops=syncs,
    )
