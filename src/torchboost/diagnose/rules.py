"""Diagnosis rules: one function per finding, all registered in :data:`RULES`.

A rule reads :class:`~torchboost.evidence.observed.Facts` (plain data; nothing runs) and
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

from torchboost.diagnose._gpu_rules import gpu_collectives, gpu_idle, gpu_pageable_copies, gpu_small_kernels, gpu_syncs
from torchboost.diagnose._host_rules import host_checkpoint, host_output
from torchboost.diagnose._eval_rules import evaluation_batch, evaluation_grad, evaluation_often
from torchboost.diagnose._line_rules import host_line, host_sync
from torchboost.diagnose._input_rules import loss_nonfinite, memory_headroom, sync_host_device
from torchboost.diagnose.data_bound import cap_by_replay
from torchboost.diagnose.measured import ranked, with_measured
from torchboost.evidence.observed import Facts
from torchboost.evidence.findings import Finding
from torchboost.evidence.steps import Summary, summarize
from torchboost.techniques.registry import techniques

__all__ = ["RULES", "Finding", "Rule", "Summary", "diagnose", "summarize", "thresholds"]

Rule = Callable[..., "Finding | None"]
"""``rule(facts, *, <threshold>=<default>, ...) -> Finding | None``."""

_OWN: dict[str, Rule] = {
    "loss.nonfinite": loss_nonfinite,
    "sync.host_device": sync_host_device,
    "host.checkpoint": host_checkpoint,
    "host.output": host_output,
    "host.sync": host_sync,
    "host.line": host_line,
    "evaluation.often": evaluation_often,
    "evaluation.grad": evaluation_grad,
    "evaluation.batch": evaluation_batch,
    "memory.headroom": memory_headroom,
    "gpu.idle": gpu_idle,
    "gpu.syncs": gpu_syncs,
    "gpu.pageable_copies": gpu_pageable_copies,
    "gpu.small_kernels": gpu_small_kernels,
    "gpu.collectives": gpu_collectives,
}
"""The diagnoses that belong to no technique: the script's own code (its syncs, checkpoint writes,
printing, tracker calls and other lines of its own, its evaluation), memory, the GPU's timeline."""

RULES: dict[str, Rule] = {
    **{rule.id: rule.check for technique in techniques() for rule in technique.rules},
    **_OWN,
}
"""Stable finding id -> rule: each technique's own (declared in its module, in application order),
then those above."""


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
    """Run every rule on ``facts``; findings ranked by measured ratio (a quick probe's) or
    expected speedup, largest first, after any blocking one (a NaN loss:
    :attr:`Finding.blocking`), one measured slower than plain last.

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
    return ranked(with_measured(cap_by_replay(findings, facts), facts))
