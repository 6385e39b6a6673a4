"""Diagnosis rules: one function per finding, all registered in :data:`RULES`.

A rule reads :class:`~torchboost.diagnose.facts.Facts` (plain data; nothing runs) and
returns a :class:`Finding` or None. Rules never recommend what is already on. Thresholds
are keyword parameters with their unit in the name (``data_wait_pct=20.0``); pass any of
them to :func:`diagnose` to override the default for every rule that takes it.

Expected speedups are Amdahl-style estimates for one change at a time: the share of the
step a change touches, times the factor it is known (or measured) to bring there; each
finding's ``formula`` shows the numbers. The tuner measures the real gain.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from torchboost.diagnose._compute_rules import (
    compile_enable,
    cudnn_benchmark,
    memory_channels_last,
    optimizer_fused,
    precision_lower,
    precision_slower_on_cpu,
)
from torchboost.diagnose._gpu_rules import gpu_collectives, gpu_idle, gpu_pageable_copies, gpu_small_kernels, gpu_syncs
from torchboost.diagnose._input_rules import (
    data_persistent_workers,
    data_pin_memory,
    data_workers,
    memory_headroom,
    sync_host_device,
    threads_oversubscribed,
)
from torchboost.diagnose.facts import Facts
from torchboost.diagnose.finding import Finding
from torchboost.diagnose.summary import Summary, summarize

__all__ = ["RULES", "Finding", "Rule", "Summary", "diagnose", "summarize", "thresholds"]

Rule = Callable[..., "Finding | None"]
"""``rule(facts, *, <threshold>=<default>, ...) -> Finding | None``."""

RULES: dict[str, Rule] = {
    "data.workers": data_workers,
    "data.pin_memory": data_pin_memory,
    "data.persistent_workers": data_persistent_workers,
    "precision.lower": precision_lower,
    "precision.slower_on_cpu": precision_slower_on_cpu,
    "compile.enable": compile_enable,
    "sync.host_device": sync_host_device,
    "optimizer.fused": optimizer_fused,
    "memory.headroom": memory_headroom,
    "threads.oversubscribed": threads_oversubscribed,
    "cudnn.benchmark": cudnn_benchmark,
    "memory.channels_last": memory_channels_last,
    "gpu.idle": gpu_idle,
    "gpu.syncs": gpu_syncs,
    "gpu.pageable_copies": gpu_pageable_copies,
    "gpu.small_kernels": gpu_small_kernels,
    "gpu.collectives": gpu_collectives,
}
"""Stable finding id -> rule. The one place finding ids are defined."""


def _keyword_defaults(rule: Rule) -> dict[str, Any]:
    return {
        name: param.default
        for name, param in inspect.signature(rule).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }


def thresholds() -> dict[str, Any]:
    """Every threshold name any rule takes, with its default (units in the names)."""
    merged: dict[str, Any] = {}
    for rule in RULES.values():
        merged.update(_keyword_defaults(rule))
    return merged


def diagnose(facts: Facts, **overrides: float) -> list[Finding]:
    """Run every rule on ``facts``; findings ranked by expected speedup, largest first.

    ``overrides`` set thresholds by name (see :func:`thresholds`); a name no rule takes
    raises TypeError listing the valid ones. Ties keep the order of :data:`RULES`.
    """
    known = thresholds()
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise TypeError(f"unknown threshold(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
    findings = []
    for rule_id, rule in RULES.items():
        kwargs = {k: v for k, v in overrides.items() if k in _keyword_defaults(rule)}
        finding = rule(facts, **kwargs)
        if finding is not None:
            if finding.id != rule_id:
                raise RuntimeError(f"rule {rule.__name__} returned id {finding.id!r}, registered as {rule_id!r}")
            findings.append(finding)
    return sorted(findings, key=lambda f: -f.expected_speedup)
