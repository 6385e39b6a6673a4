"""The observed run's facts as built so far: the first build with the script's objects alive is kept.

The facts are built by :func:`~torchboost.observe.record.facts_builder.build_facts`, from the
recorder's parts; the first build with the script's objects alive (the end of warm-up) is
kept, so the descriptions of the model and optimizer outlive them. At the run's end a CPU
run's bf16 matmul speed is measured once, for every later write. What is built is written
by :class:`~torchboost.observe.record.run_output.RunOutput`.
"""

from __future__ import annotations

import math
import statistics
import time
from functools import partial
from typing import Any, Callable

from torchboost import env as _env
from torchboost.evidence.observed import Facts, QuickProbeFacts
from torchboost.evidence.quick_probe import bursts_decided
from torchboost.observe.probes.quick import QuickProbes, choose_switches, quick_budget_ms, quick_pairs, switch_for
from torchboost.observe.record.facts_builder import RecordedParts, build_facts, probe_context, uses_cuda
from torchboost.plan import Bursts
from torchboost.techniques.registry import ProbeContext

__all__ = ["FactsSoFar"]


class FactsSoFar:
    """The run's :class:`Facts` as built so far, from :class:`RecordedParts` alone; its own
    failures go to ``parts.errors``, never raised."""

    def __init__(self, parts: RecordedParts) -> None:
        self._parts = parts
        self._described: Facts | None = None  # facts built while the script's objects lived
        self.bf16_speedup: float | None = None
        """The CPU's bf16 matmul speed over fp32, once measured at the run's end."""
        parts.stages.planned = self.planned_steps  # the replay asks whether the run has room for it

    def uses_cuda(self) -> bool:
        """The script trains on CUDA (see :func:`uses_cuda`)."""
        return uses_cuda(self._described.model if self._described else None, self._parts.seen.probe_started_cuda)

    def at_warmup_end(self, uses_booster: bool) -> None:
        """Probe the settings and describe the script's objects while they are set up and alive."""
        self._parts.seen.snapshot_settings()
        self._guarded(lambda: self._parts.seen.read_stated_length(self._parts.timing.boundaries))
        self._described = build_facts(self._parts, uses_booster, self._described, fresh=True)

    def planned_steps(self) -> int | None:
        """The script's planned run in steps as the facts built at the end of warm-up give it."""
        return self._described.planned_steps if self._described is not None else None

    def facts(self, uses_booster: bool) -> Facts:
        """Everything seen so far (converts pending losses: may sync)."""
        if self._described is None or self._described.model is None:
            self._guarded(self._parts.seen.snapshot_settings)
        facts = build_facts(self._parts, uses_booster, self._described)
        if self._described is None or self._described.model is None:
            self._described = facts
        return facts

    def for_writing(self, uses_booster: bool, exit_code: int | None) -> Facts:
        """:meth:`facts` as facts.json gets them: with the bf16 speedup once measured, and at
        the run's end (``exit_code`` given) its exit code, measuring that speedup on a CPU."""
        facts = self.facts(uses_booster)
        if exit_code is not None:
            facts.exit_code = exit_code
            if facts.model is not None and facts.model.device == "cpu":
                self._guarded(self._measure_bf16)
        facts.cpu_bf16_speedup = self.bf16_speedup
        return facts

    def start_quick(self, quick: QuickProbes, uses_booster: bool) -> bool:
        """Start ``quick`` with the switches whose findings fire on the facts so far, within
        :func:`quick_budget_ms` of the run's time until now; False when nothing is probed."""
        try:
            facts = self.facts(uses_booster)
            if not facts.steps:
                return False
            parts = self._parts
            ctx = probe_context(parts, facts.model.device if facts.model else "cpu")
            step_ms = statistics.median(s.total_ms for s in facts.steps)
            if parts.bursts is not None:  # a burst trial: its one switch is given, no estimate orders it
                return _start_bursts(quick, parts, parts.bursts, ctx, step_ms)
            if facts.model is not None and facts.model.device == "cpu" and self.bf16_speedup is None:
                self._measure_bf16()  # ~0.1 s, between steps: the estimates that order the probes use it
            facts.cpu_bf16_speedup = self.bf16_speedup
            switches, errors = choose_switches(facts, ctx)
            parts.errors.extend(errors)
            budget_ms = quick_budget_ms(time.time() - parts.run.started_at)
            return quick.start(switches, budget_ms=budget_ms, step_ms=step_ms, loss=parts.losses.last,
                               pairs=quick_pairs(step_ms))
        except Exception as exc:  # noqa: BLE001 - the observer must never break the user's run
            self._parts.errors.append(f"start_quick: {type(exc).__name__}: {exc}")
            quick.close()
            return False

    def _measure_bf16(self) -> None:
        # ~0.1 s: only at the end, outside every recorded step.
        self.bf16_speedup = float(_env.measure_cpu_bf16_speedup())

    def _guarded(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the observer must never break the user's run
            self._parts.errors.append(f"{getattr(fn, '__name__', 'observer')}: {type(exc).__name__}: {exc}")


def _start_bursts(quick: QuickProbes, parts: RecordedParts, bursts: Bursts, ctx: ProbeContext, step_ms: float) -> bool:
    """A burst trial: the switch making the plan's candidate change, for its pairs of bursts,
    however long they take; False (its result saying why) when no switch makes it."""
    switch, why = switch_for(bursts.change, ctx)
    if switch is None:
        quick.results.append(QuickProbeFacts(finding_id="", label="bursts", error=why))
        return False
    decided = None if bursts.min_gain is None else partial(bursts_decided, min_gain=bursts.min_gain)
    return quick.start([switch], budget_ms=math.inf, step_ms=step_ms, loss=parts.losses.last,
                       pairs=bursts.pairs, burst=bursts.steps, decided=decided)
