"""GPU facts from a Kineto (Chrome-trace) timeline: how busy the device was, and why not.

The figures follow the definitions of HolisticTraceAnalysis's temporal breakdown, so the
two can be checked against each other on the same trace: the device's events are its
kernels, memory copies and memsets (the events with a ``stream``); the *span* runs from
the first one's start to the last one's end; *idle* is the span covered by none of them;
*compute* is the time covered by computation kernels (not NCCL communication, not
memcpy/memset); *non-compute* is the rest. Percentages are of the span.

The rest is what a GPU run is bounded by and a CPU doctor cannot see: host-to-device
copies from pageable memory, host-device synchronisations and the operators that caused
them (those the profiled steps called: ``torch.profiler`` syncs the device itself when it
stops, after the last step, and that is none of the script's), the share of tiny kernels
(a launch-bound step), and collective kernels' time and how much of it overlaps
computation. The steps are the host's ProfilerStep marks (Kineto copies each onto the
device's timeline too, as a ``gpu_user_annotation``: not a step).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from torchboost._intervals import covered, overlap, union

__all__ = ["GpuFacts", "gpu_facts", "SMALL_KERNEL_US", "STEP_MARK_CATS"]

SMALL_KERNEL_US = 10.0
"""A kernel shorter than this is launch-bound: the host's launch costs about as much."""
STEP_MARK_CATS = ("user_annotation", "cpu_op")
"""Categories of the host's ProfilerStep marks (``cpu_op`` in older traces); Kineto's copy of
each mark on the device's timeline (``gpu_user_annotation``) is not a step."""
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_SYNC = re.compile(r"^cuda(Stream|Device|Event)Synchronize$")
_COMM = re.compile(r"nccl", re.IGNORECASE)


@dataclass
class GpuFacts:
    """What the device did over a trace's profiled window (times in ms)."""

    span_ms: float = 0.0
    busy_pct: float = 0.0
    idle_pct: float = 0.0
    compute_pct: float = 0.0
    """Time covered by computation kernels, percent of the span (HTA's compute time)."""
    non_compute_pct: float = 0.0
    """Communication, memcpy and memset time not under computation, percent of the span."""
    kernel_ms: float = 0.0
    memcpy_ms: float = 0.0
    memset_ms: float = 0.0
    kernels: int = 0
    small_kernel_pct: float = 0.0
    """Share of kernels under :data:`SMALL_KERNEL_US`."""
    h2d_pageable_count: int = 0
    h2d_pageable_bytes: int = 0
    syncs: int = 0
    sync_ops: dict[str, int] = field(default_factory=dict)
    """The CPU operators around the synchronisations (``aten::item``...), counted."""
    collective_ms: float = 0.0
    collective_overlap_pct: float | None = None
    """Share of collective-kernel time during which a computation kernel also ran."""
    steps: int = 0
    """ProfilerStep ranges in the trace (0 when it marks none)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return asdict(self)

    def per_step(self, value: float) -> float:
        """``value`` divided by the trace's steps (itself when it marks none)."""
        return value / self.steps if self.steps else value


def _spans(events: Iterable[dict[str, Any]], cats: Sequence[str]) -> list[tuple[float, float, dict[str, Any]]]:
    return [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e)
            for e in events if e.get("ph") == "X" and e.get("cat") in cats and "ts" in e]


def _step_marks(events: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """The (start, end) of each ProfilerStep mark, microseconds, in time order."""
    return sorted((s, e) for s, e, ev in _spans(events, STEP_MARK_CATS)
                  if str(ev.get("name", "")).startswith("ProfilerStep#"))


def _profiled(events: Sequence[dict[str, Any]], device: list, marks: list[tuple[float, float]]) -> tuple[list, int]:
    """The device events of the profiled steps, and how many steps: with two or more
    ProfilerStep ``marks``, those launched before the last step starts (the last may be cut
    short by the profiler's stop), as HTA counts them; else all of them."""
    starts = [start for start, _ in marks]
    if len(starts) < 2:
        return device, len(starts)
    last = max(starts)
    launched = {ev["args"]["correlation"]: float(ev["ts"]) for ev in events
                if "stream" not in ev.get("args", {}) and "correlation" in ev.get("args", {}) and "ts" in ev}
    kept = [d for d in device if launched.get(d[2]["args"].get("correlation"), last) < last]
    return kept, len(starts) - 1


def gpu_facts(events: Sequence[dict[str, Any]]) -> GpuFacts | None:
    """The :class:`GpuFacts` of one rank's trace events; None when no device event is there."""
    device = [(s, e, ev) for s, e, ev in _spans(events, _DEVICE_CATS) if "stream" in ev.get("args", {})]
    marks = _step_marks(events)
    device, steps = _profiled(events, device, marks)
    if not device:
        return None
    start, end = min(s for s, _, _ in device), max(e for _, e, _ in device)
    span = end - start
    kernels = [(s, e, ev) for s, e, ev in device if ev["cat"] == "kernel"]
    compute = [(s, e) for s, e, ev in kernels if not _COMM.search(ev["name"])]
    comm = [(s, e) for s, e, ev in kernels if _COMM.search(ev["name"])]
    busy = covered((s, e) for s, e, _ in device)
    facts = GpuFacts(
        span_ms=span / 1e3, busy_pct=100 * busy / span if span else 0.0, idle_pct=100 * (span - busy) / span if span else 0.0,
        compute_pct=100 * covered(compute) / span if span else 0.0,
        kernel_ms=sum(e - s for s, e, _ in kernels) / 1e3, kernels=len(kernels),
        memcpy_ms=sum(e - s for s, e, ev in device if ev["cat"] == "gpu_memcpy") / 1e3,
        memset_ms=sum(e - s for s, e, ev in device if ev["cat"] == "gpu_memset") / 1e3,
        small_kernel_pct=100 * sum(1 for s, e, _ in kernels if e - s < SMALL_KERNEL_US) / len(kernels) if kernels else 0.0,
        collective_ms=covered(comm) / 1e3,
        collective_overlap_pct=100 * overlap(comm, compute) / covered(comm) if comm else None,
        steps=steps,
    )
    facts.non_compute_pct = max(0.0, facts.busy_pct - facts.compute_pct)
    pageable = [ev for _, _, ev in device if ev["cat"] == "gpu_memcpy" and "HtoD" in ev["name"] and "Pageable" in ev["name"]]
    facts.h2d_pageable_count = len(pageable)
    facts.h2d_pageable_bytes = sum(int(ev.get("args", {}).get("bytes", 0)) for ev in pageable)
    facts.syncs, facts.sync_ops = _syncs(events, marks)
    return facts


def _sync_window(marks: list[tuple[float, float]]) -> tuple[float, float]:
    """Where the counted syncs start, microseconds: the steps :func:`_profiled` keeps (from
    the first step's start to the last one's; within the one step when there is one; all
    the trace without marks). A profiler's own sync at its stop falls after them."""
    if len(marks) >= 2:
        return marks[0][0], marks[-1][0]
    if marks:
        return marks[0]
    return -math.inf, math.inf


def _syncs(events: Sequence[dict[str, Any]], marks: list[tuple[float, float]]) -> tuple[int, dict[str, int]]:
    low, high = _sync_window(marks)
    runtime = [(s, e, ev) for s, e, ev in _spans(events, ("cuda_runtime", "cuda_driver"))
               if _SYNC.match(ev["name"]) and low <= s < high]
    ops = sorted(((s, e, ev) for s, e, ev in _spans(events, ("cpu_op",))), key=lambda t: t[0])
    counted: dict[str, int] = {}
    for s, e, ev in runtime:
        # the innermost CPU operator on the same thread that encloses the sync
        around = [op for op in ops if op[2].get("tid") == ev.get("tid") and op[0] <= s and op[1] >= e]
        name = min(around, key=lambda op: op[1] - op[0])[2]["name"] if around else ev["name"]
        counted[name] = counted.get(name, 0) + 1
    return len(runtime), counted
