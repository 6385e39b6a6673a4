"""Rules about the device's timeline: why a GPU waits (from :class:`~torchboost.diagnose.gpu.GpuFacts`).

Each reads ``facts.gpu`` (a trace's, or a live CUDA run's profiler window) and returns a
Finding or None; thresholds are keyword parameters with their unit in the name. The
expected gains are bounds from the idle time: work that stops making the device wait can
give back at most the time it waited, and the rules assume half of it
(:data:`RECOVERABLE`), saying so in the formula.
"""

from __future__ import annotations

from typing import Any

from torchboost.config import AUTO, Overlay
from torchboost.evidence.rulekit import r, view
from torchboost.evidence.observed import Facts
from torchboost.evidence.findings import Finding
from torchboost.techniques.compile import CompileConfig
from torchboost.techniques.loader import LoaderConfig

__all__ = ["gpu_collectives", "gpu_idle", "gpu_pageable_copies", "gpu_small_kernels", "gpu_syncs"]

RECOVERABLE = 0.5
"""Share of the device's idle time a host-side fix is assumed to give back."""


def _gain(idle_pct: float, share: float = RECOVERABLE) -> float:
    return 1.0 / (1.0 - share * idle_pct / 100.0)


def _idle_formula(gpu: dict[str, Any], speedup: float) -> str:
    return (f"1 / (1 - r x idle) = 1 / (1 - {RECOVERABLE} x {gpu['idle_pct'] / 100:.3f}) = {speedup:.3f}; "
            f"idle = share of the device's span with no kernel, copy or memset; r = {RECOVERABLE} of it "
            "given back (assumed)")


def gpu_idle(facts: Facts, *, idle_pct: float = 30.0, data_pct: float = 30.0) -> Finding | None:
    """The device is idle ``idle_pct`` percent of its span or more. When the step waits for
    data ``data_pct`` percent of the time or more, the loader starves it; otherwise the host
    cannot launch work fast enough (Python, small kernels): a launch-bound step."""
    gpu = facts.gpu
    if not gpu or gpu["idle_pct"] < idle_pct:
        return None
    v = view(facts)
    waiting = 100 * v.share.get("data", 0.0)
    speedup = _gain(gpu["idle_pct"])
    evidence = {"gpu_idle_pct": r(gpu["idle_pct"], 1), "gpu_busy_pct": r(gpu["busy_pct"], 1),
                "data_wait_pct": r(waiting, 1), "small_kernel_pct": r(gpu["small_kernel_pct"], 1)}
    if waiting >= data_pct:
        return Finding(
            id="gpu.idle", title=f"The GPU idles {gpu['idle_pct']:.0f}% of the time, waiting for data "
                                 f"({waiting:.0f}% of the step); load batches in worker processes",
            evidence=evidence, fix=Overlay.of(LoaderConfig, num_workers=AUTO, pin_memory=True),
            expected_speedup=speedup, formula=_idle_formula(gpu, speedup))
    return Finding(
        id="gpu.idle", title=f"The GPU idles {gpu['idle_pct']:.0f}% of the time while the host launches "
                             "work (launch-bound); compile the model to launch fewer, larger kernels",
        evidence=evidence, fix=Overlay.of(CompileConfig, mode="default"),
        expected_speedup=speedup, formula=_idle_formula(gpu, speedup),
        notes=["torchboost tune measures compile's gain against its compile time; reduce-overhead "
               "(CUDA graphs) only as a measured candidate."])


def gpu_syncs(facts: Facts, *, syncs_per_step: float = 1.0, idle_pct: float = 10.0) -> Finding | None:
    """The host waits for the device ``syncs_per_step`` times per step or more (``.item()``,
    ``.cpu()``, a copy to pageable memory) while the device idles ``idle_pct`` percent or more."""
    gpu = facts.gpu
    if not gpu or not gpu["syncs"] or gpu["idle_pct"] < idle_pct:
        return None
    per_step = gpu["syncs"] / max(1, gpu["steps"] or 1)
    if per_step < syncs_per_step:
        return None
    speedup = _gain(gpu["idle_pct"], RECOVERABLE / 2)
    ops = ", ".join(f"{name} x{n}" for name, n in sorted(gpu["sync_ops"].items(), key=lambda kv: -kv[1])[:3])
    return Finding(
        id="gpu.syncs", title=f"The host waits for the GPU {per_step:.0f} times per step ({ops}); keep values "
                              "on the device",
        evidence={"syncs_per_step": r(per_step, 1), "sync_ops": ops, "gpu_idle_pct": r(gpu["idle_pct"], 1)},
        advice="the syncs are in the training script: keep values on the device",
        advice_code="running_loss += loss.detach()  # no .item() every step\nx = x.to(device, non_blocking=True)",
        expected_speedup=speedup,
        formula=f"1 / (1 - r x idle) = 1 / (1 - {RECOVERABLE / 2} x {gpu['idle_pct'] / 100:.3f}) = {speedup:.3f}; "
                "each sync empties the device's queue; r: a quarter of the idle time given back (assumed)")


def gpu_pageable_copies(facts: Facts, *, copies_per_step: float = 1.0) -> Finding | None:
    """Host-to-device copies from pageable memory, ``copies_per_step`` per step or more: each
    goes through a staging buffer and blocks the host; pinned memory and ``non_blocking``
    let the copy overlap compute."""
    gpu = facts.gpu
    if not gpu or gpu["h2d_pageable_count"] / max(1, gpu["steps"] or 1) < copies_per_step:
        return None
    share = 100 * gpu["memcpy_ms"] / gpu["span_ms"] if gpu["span_ms"] else 0.0
    speedup = 1.0 / (1.0 - min(0.9, share / 100))
    return Finding(
        id="gpu.pageable_copies", title=f"{gpu['h2d_pageable_count']} host-to-device copies from pageable memory "
                                        f"({gpu['h2d_pageable_bytes'] / 2**20:.1f} MiB); pin the loader's memory",
        evidence={"h2d_pageable_count": gpu["h2d_pageable_count"], "h2d_pageable_bytes": gpu["h2d_pageable_bytes"],
                  "memcpy_pct": r(share, 1)},
        fix=Overlay.of(LoaderConfig, pin_memory=True),
        expected_speedup=speedup,
        formula=f"1 / (1 - m) = {speedup:.3f}; m = {share / 100:.3f} share of the span in memory copies (at most "
                "this overlaps compute once pinned)")


def gpu_small_kernels(facts: Facts, *, small_kernel_pct: float = 50.0, idle_pct: float = 20.0) -> Finding | None:
    """``small_kernel_pct`` percent of kernels or more are tiny and the device idles
    ``idle_pct`` percent or more: launches, not maths, bound the step; compiling fuses them."""
    gpu = facts.gpu
    if not gpu or gpu["small_kernel_pct"] < small_kernel_pct or gpu["idle_pct"] < idle_pct:
        return None
    speedup = _gain(gpu["idle_pct"])
    return Finding(
        id="gpu.small_kernels", title=f"{gpu['small_kernel_pct']:.0f}% of the {gpu['kernels']} kernels run under "
                                      "10 µs: fuse them with torch.compile",
        evidence={"small_kernel_pct": r(gpu["small_kernel_pct"], 1), "kernels": gpu["kernels"],
                  "gpu_idle_pct": r(gpu["idle_pct"], 1)},
        fix=Overlay.of(CompileConfig, mode="default"),
        expected_speedup=speedup, formula=_idle_formula(gpu, speedup))


def gpu_collectives(facts: Facts, *, collective_pct: float = 10.0, overlap_pct: float = 50.0) -> Finding | None:
    """Collectives run ``collective_pct`` percent of the span or more and less than
    ``overlap_pct`` percent of that time overlaps computation: the gradient all-reduce waits
    instead of running under the backward pass."""
    gpu = facts.gpu
    if not gpu or not gpu["span_ms"] or gpu["collective_overlap_pct"] is None:
        return None
    share = 100 * gpu["collective_ms"] / gpu["span_ms"]
    if share < collective_pct or gpu["collective_overlap_pct"] >= overlap_pct:
        return None
    exposed = share / 100 * (1 - gpu["collective_overlap_pct"] / 100)
    speedup = 1.0 / (1.0 - RECOVERABLE * exposed)
    return Finding(
        id="gpu.collectives", title=f"Collectives take {share:.0f}% of the GPU's time and only "
                                    f"{gpu['collective_overlap_pct']:.0f}% of it overlaps compute",
        evidence={"collective_pct": r(share, 1), "collective_overlap_pct": r(gpu["collective_overlap_pct"], 1)},
        advice="DistributedDataParallel's buckets and the model's order decide it",
        advice_code="DistributedDataParallel(model, bucket_cap_mb=25, gradient_as_bucket_view=True)",
        expected_speedup=speedup,
        formula=f"1 / (1 - r x c x (1 - o)) = {speedup:.3f}; c = {share / 100:.3f} collective share, "
                f"o = {gpu['collective_overlap_pct'] / 100:.3f} overlapped, r = {RECOVERABLE} (assumed)",
        notes=["Accumulating gradients over micro-batches (no_sync) all-reduces once per window."])
