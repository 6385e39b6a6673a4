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
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import r, view
from torchboost.techniques.loader import CpuConfig, LoaderConfig, apply_threads, auto_threads, resolve_threads
from torchboost.techniques.registry import FrameworkSpelling, NoCode, Preparation, Rule, Technique

__all__ = ["CpuConfig", "TECHNIQUE", "apply_threads", "auto_threads", "resolve_threads", "threads_oversubscribed"]


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


TECHNIQUE = Technique(
    name="cpu",
    title="CPU threads",
    placed='a process-wide switch: the intra-op thread count is set before any tensor work, so every later step runs with it',
    section=CpuConfig,
    apply=_apply,
    nocode=NoCode(at_start=_nocode_start, in_effect=_nocode_in_effect),
    spell=_spell,
    rules=(Rule("threads.oversubscribed", threads_oversubscribed),),
)
