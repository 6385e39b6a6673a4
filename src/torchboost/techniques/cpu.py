"""Host CPU threads, one technique: torch's intra-op thread count, next to the loader's workers.

The threads and the loader's workers run on the same cores, so the two are resolved
together: ``"auto"`` is the loader's :func:`~torchboost.techniques.loader.resolve_host`,
the section and its rule (:class:`CpuConfig`, :func:`auto_threads`) live beside it in
:mod:`torchboost.techniques.loader.host_threads`, and the tuner's lever for both is the
loader's. This module is the technique's descriptor: the process-wide switch, its no-code
twin, its spelling and its diagnosis.
"""

from __future__ import annotations

from typing import Any

import torch

from torchboost.config import Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.evidence.rulekit import r, view
from torchboost.techniques.loader import CpuConfig, LoaderConfig, apply_threads, auto_threads, resolve_threads
from torchboost.env import BUSY_PCT, probe
from torchboost.techniques.registry import FrameworkSpelling, NoCode, Preparation, ProbeContext, QuickSwitch, Rule, Technique

__all__ = ["CpuConfig", "TECHNIQUE", "apply_threads", "auto_threads", "contended_threads", "resolve_threads",
           "threads_contended", "threads_oversubscribed"]


# -- the descriptor ---------------------------------------------------------------------

def _threads(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _apply(prep: Preparation) -> None:
    # A process-wide switch: first, so everything after runs under it.
    apply_threads(_threads(prep.config.section(CpuConfig).threads))


def _nocode_start(values: dict[str, Any], notes: list[str]) -> None:
    threads = _threads(values.get("threads"))
    if threads is not None:
        apply_threads(threads)
        notes.append(f"intra-op threads set to {threads}")


def _nocode_in_effect(values: dict[str, Any], loaders: list[Any]) -> list[str]:
    # The script may set its own count after ours (set at install, before it ran).
    threads = _threads(values.get("threads"))
    if threads is None:
        return []
    now = torch.get_num_threads()
    if now == threads:
        return [f"intra-op threads set to {threads}"]
    return [f"the script sets {now} thread{'' if now == 1 else 's'} itself (torchboost's {threads} did not hold)"]


def _spell(section: CpuConfig) -> FrameworkSpelling:
    threads = _threads(section.threads)
    return FrameworkSpelling(code=(f"torch.set_num_threads({threads})",) if threads is not None else ())


# -- its diagnosis ------------------------------------------------------------------------

def threads_oversubscribed(facts: Facts, *, oversubscription_ratio: float = 1.0) -> Finding | None:
    """On a CPU run, intra-op threads plus loader workers exceed the cores by more than
    ``oversubscription_ratio``: threads preempt each other and parallel regions stall."""
    v = view(facts)
    if v.device != "cpu" or v.cores < 1 or v.step_ms <= 0:
        return None
    workers = facts.loader.num_workers if facts.loader else 0
    threads = facts.cpu_threads
    ratio = (threads + workers) / v.cores
    if ratio <= oversubscription_ratio:
        return None
    new_workers = workers if workers < v.cores else v.cores // 2
    new_threads = max(1, v.cores - new_workers)
    if (new_threads, new_workers) == (threads, workers):
        return None
    compute = v.compute_share + v.share["optimizer"]
    slowdown = min(2.0, ratio)
    speedup = 1.0 / ((1.0 - compute) + compute / slowdown)
    if speedup <= 1.0:
        return None
    fix = Overlay.of(CpuConfig, threads=new_threads)
    if new_workers != workers:
        fix |= Overlay.of(LoaderConfig, num_workers=new_workers)
    return Finding(
        id="threads.oversubscribed",
        title=f"{threads} intra-op threads + {workers} loader workers on {v.cores} cores; "
              f"use {new_threads} threads",
        evidence={
            "cpu_threads": threads,
            "num_workers": workers,
            "cpu_cores": v.cores,
            "oversubscription_ratio": r(ratio, 2),
            "compute_pct": r(compute * 100, 1),
        },
        fix=fix,
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {compute:.3f} forward+backward+optimizer "
                f"share, s = min(2, (threads + workers) / cores) = {slowdown:.2f} "
                "(parallel regions slowed in proportion to oversubscription; assumed, capped at 2x)",
        notes=["Measure: the right split between threads and workers depends on the model and the data."],
    )


def contended_threads(cores: int, other_load_pct: float) -> int:
    """Intra-op threads for the cores other processes leave: what they left free of ``cores``
    (``other_load_pct`` of the machine busy with them), rounded to the nearest core below a
    quarter over, at least one. The loader's workers are the oversubscription finding's."""
    free = cores * (1.0 - other_load_pct / 100.0)
    return max(1, int(free + 0.25))


def threads_contended(facts: Facts, *, busy_pct: float = BUSY_PCT) -> Finding | None:
    """On a CPU run, other processes took more than ``busy_pct`` of the machine while the
    steps were recorded, and torch's intra-op threads outnumber the cores they left: each
    parallel region waits for a thread that shares its core with them."""
    v = view(facts)
    load = facts.other_load_pct
    if v.device != "cpu" or load is None or load <= busy_pct or v.cores < 2 or v.step_ms <= 0:
        return None
    threads = facts.cpu_threads
    want = contended_threads(v.cores, load)
    if want >= threads:
        return None
    free = v.cores * (1.0 - load / 100.0)
    compute = v.compute_share + v.share["optimizer"]
    slowdown = min(2.0, threads / max(free, 0.5))
    speedup = 1.0 / ((1.0 - compute) + compute / slowdown)
    if speedup <= 1.0:
        return None
    return Finding(
        id="threads.contended",
        title=f"Other processes used {load:.0f}% of the machine while the steps ran, leaving about "
              f"{free:.1f} of {v.cores} cores to {threads} intra-op threads; use {want}",
        evidence={"cpu_threads": threads, "cpu_cores": v.cores, "other_load_pct": r(load, 1),
                  "free_cores": r(free, 2), "compute_pct": r(compute * 100, 1)},
        fix=Overlay.of(CpuConfig, threads=want),
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {compute:.3f} forward+backward+optimizer share, "
                f"s = min(2, threads / free cores) = {slowdown:.2f} (parallel regions wait for the thread "
                "that shares its core; assumed, capped at 2x)",
        notes=["Measured beside other processes: once they are done, torch's own thread count is "
               "faster again. Tune on the machine as the run will have it."],
    )


def _example() -> Facts:
    # nanoGPT's shape on 2 cores beside a one-thread loop: half the machine taken, 2 threads.
    steps = [StepRecord(i, 6500.0, forward_ms=2000.0, backward_ms=4000.0, optimizer_ms=300.0) for i in range(6)]
    return Facts(env={"device": "cpu", "cpu_cores": 2}, steps=steps, cpu_threads=2, other_load_pct=49.0)


def quick_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """Fewer intra-op threads as a switch between steps: the count a tuning trial's bursts
    ask for (``ctx.wanted``), else the one :func:`threads_contended` proposes for the load
    measured while the steps were recorded; None on a GPU, or with nothing to change."""
    if ctx.device != "cpu":
        return None
    before = torch.get_num_threads()
    wanted = ctx.wanted.get(f"{CpuConfig.section}.threads")
    if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted >= 1:
        target = wanted
    elif ctx.other_load_pct is not None:
        target = contended_threads(probe().cpu_cores, ctx.other_load_pct)
    else:
        return None
    if target == before:
        return None
    return QuickSwitch("threads.contended", f"{target} intra-op thread{'s' if target > 1 else ''}",
                       on=lambda: torch.set_num_threads(target), off=lambda: torch.set_num_threads(before),
                       setting=Overlay.of(CpuConfig, threads=target).to_dict())


TECHNIQUE = Technique(
    name="cpu",
    title="CPU threads",
    placed='a process-wide switch: the intra-op thread count is set before any tensor work, so every later step runs with it',
    section=CpuConfig,
    apply=_apply,
    nocode=NoCode(at_start=_nocode_start, in_effect=_nocode_in_effect),
    spell=_spell,
    rules=(Rule("threads.oversubscribed", threads_oversubscribed), Rule("threads.contended", threads_contended, example=_example)),
    quick_probe=quick_switch,
)
