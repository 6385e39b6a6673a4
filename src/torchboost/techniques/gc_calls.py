"""Garbage collection the script calls in its loop: ``[gc]``, its finding, probe and lever.

A script that calls ``gc.collect()`` every step (to keep memory down, or left from a leak
hunt) pays a full collection each time, and a full collection walks every live Python
object: with a few hundred thousand of them (a cache of samples, a list of records) that
is 100 ms and more, against a step of a few. The line sampler finds the call at its line
(:mod:`torchboost.evidence.host_lines`); the finding :func:`host_gc` names it with its
cost, and the fix in the script's words: collect every 100 steps, or ``gc.freeze()`` after
set-up.

It is also a setting that changes no result: ``[gc] every = N`` lets one ``gc.collect()``
call in N run (the others return 0 at once), from outside (``torchboost run`` and tune's
trials, from the script's start) or in the Booster's ``prepare``. Between two steps it can
be switched, so the doctor times it (its quick probe skips the calls of a step) and tune
decides it in bursts. ``"auto"`` leaves the script's calls as they are.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from torchboost.config import AUTO, KEEP, ConfigError, Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.host_lines import HostLine
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.rulekit import less_often, r
from torchboost.evidence.steps import line_view
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, QuickSwitch, ResolveContext, Resolution, Rule,
    Technique, TuneContext,
)

__all__ = ["GC_EVERY", "GcConfig", "GcTuning", "TECHNIQUE", "collect_every", "host_gc"]

GC_EVERY = 100
"""Steps between two collections the fix proposes."""
_GC_LINE = re.compile(r"\bgc\.collect\s*\(")


@dataclass(frozen=True, kw_only=True)
class GcConfig:
    """The script's own ``gc.collect()`` calls, thinned where the file says so."""

    section: ClassVar[str] = "gc"

    every: int | str = AUTO
    """auto (the script's calls as they are) | keep | N >= 1: one ``gc.collect()`` call in N
    runs, the others return 0 at once. Changes no result of the training."""

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not (self.every in (AUTO, KEEP) or (isinstance(self.every, int)
                                                                                and self.every >= 1)):
            raise ConfigError(f"gc.every: expected 'auto', 'keep' or a whole number of calls >= 1, got {self.every!r}")

    @classmethod
    def off(cls) -> "GcConfig":
        """The script's calls as they are."""
        return cls(every=KEEP)


@dataclass(frozen=True)
class GcTuning:
    """What tune needs of the doctor's facts: the share of the step ``gc.collect()`` took."""

    gc_pct: float = 0.0


class _Thinned:
    """``gc.collect`` letting one call in ``every`` through; :meth:`restore` puts it back."""

    def __init__(self, every: int) -> None:
        self.original: Callable[..., int] = gc.collect
        self.every, self.calls = every, 0
        gc.collect = self  # type: ignore[assignment]

    def __call__(self, *args: Any, **kwargs: Any) -> int:
        self.calls += 1
        return self.original(*args, **kwargs) if self.calls % self.every == 0 else 0

    def restore(self) -> None:
        if gc.collect is self:
            gc.collect = self.original  # type: ignore[assignment]


def collect_every(every: int) -> _Thinned:
    """Let one ``gc.collect()`` call in ``every`` run from now on; returns what undoes it."""
    return _Thinned(every)


def _gc_row(facts: Facts) -> tuple[dict[str, Any] | None, float]:
    rows, step_ms = line_view(facts)
    row = next((x for x in rows if x["bucket"] == "other" and not x["callee"] and _GC_LINE.search(x["code"])), None)
    return row, step_ms


def host_gc(facts: Facts, *, gc_pct: float = 5.0) -> Finding | None:
    """``gc.collect()`` called in the loop takes ``gc_pct`` percent of the step or more:
    collect every :data:`GC_EVERY` steps, or freeze what set-up made (``gc.freeze()``)."""
    row, step_ms = _gc_row(facts)
    if row is None or row["pct"] < gc_pct:
        return None
    speedup, formula = less_often(step_ms, row["ms"], GC_EVERY)
    return Finding(
        id="host.gc",
        title=f"{row['where']} gc.collect() takes {row['pct']:.0f}% of the step ({row['ms']:.1f} ms): collect "
              f"every {GC_EVERY} steps, or gc.freeze() after set-up",
        evidence={"line": row["where"], "code": row["code"], "line_ms_per_step": r(row["ms"]),
                  "line_pct": r(row["pct"], 1), "step_ms": r(step_ms)},
        fix=Overlay.of(GcConfig, every=GC_EVERY),
        advice=f"the collection is the script's own call: make it every {GC_EVERY} steps, or freeze the objects "
               "set-up made so that no collection walks them again",
        advice_code=(f"if step % {GC_EVERY} == 0:  # at {row['where']}\n    gc.collect()\n"
                     "# or, once after set-up (datasets, caches built): what exists now is never walked again\n"
                     "gc.freeze()"),
        expected_speedup=speedup,
        formula=f"{formula}; P ms of gc.collect() per step, {GC_EVERY}x less often",
        notes=["A full collection walks every live Python object: its cost grows with what the script keeps "
               "(a cache of samples, a list of losses), not with the model.",
               "Collecting less often changes no result of the training: the same tensors, the same losses."],
    )


def _example() -> Facts:
    line = HostLine("other", "/home/me/train.py", 42, "gc.collect()", "", {i: 160.0 for i in range(5, 25)})
    steps = [StepRecord(i, 163.0, forward_ms=1.0, backward_ms=1.5, optimizer_ms=0.3) for i in range(5, 25)]
    return Facts(steps=steps, warmup_steps=5, host=HostFacts(lines=[line], line_interval_ms=2.0))


def _resolve(ctx: ResolveContext) -> Resolution:
    value = ctx.config.section(GcConfig).every
    if value == AUTO:
        return Resolution(Overlay.of(GcConfig, every=KEEP),
                          {"gc.every": "auto leaves the script's gc.collect() calls as they are (torchboost doctor "
                                       "says when they cost)"})
    return Resolution(Overlay.of(GcConfig, every=value), {"gc.every": "set in config"})


def _apply(prep: Preparation) -> None:
    every = prep.config.section(GcConfig).every
    if isinstance(every, int) and every > 1:
        collect_every(every)


def _nocode_start(values: dict[str, Any], notes: list[str]) -> None:
    every = values.get("every")
    if isinstance(every, int) and every > 1:
        collect_every(every)
        notes.append(f"gc.collect() runs one call in {every}")


def _quick(ctx: ProbeContext) -> QuickSwitch | None:
    """The script's ``gc.collect()`` calls skipped for a step; None when the sampler saw none."""
    if not any(line.bucket == "other" and _GC_LINE.search(line.code) and not line.callee for line in ctx.host_lines):
        return None
    thinned: list[_Thinned] = []
    return QuickSwitch("host.gc", "gc.collect() skipped", on=lambda: thinned.append(collect_every(10**9)),
                       off=lambda: thinned.pop().restore() if thinned else None,
                       setting=Overlay.of(GcConfig, every=GC_EVERY).to_dict())


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    return [Overlay.of(GcConfig, every=GC_EVERY)] if ctx.own(GcTuning).gc_pct >= 5.0 else []


def _tune_context(facts: Facts) -> GcTuning:
    row, _ = _gc_row(facts)
    return GcTuning(gc_pct=row["pct"] if row else 0.0)


def _spell(section: GcConfig) -> FrameworkSpelling:
    if not isinstance(section.every, int) or section.every <= 1:
        return FrameworkSpelling()
    return FrameworkSpelling(code=(f"if step % {section.every} == 0:\n    gc.collect()",))


TECHNIQUE = Technique(
    name="gc",
    title="garbage collection called in the loop",
    after=("debug",),
    placed="a process-wide call, thinned with the other switches before the model is touched",
    section=GcConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(at_start=_nocode_start),
    levers=(Lever("gc", f"gc.collect() every {GC_EVERY} calls", Parity.EXACT, _propose, ("host.gc",), priority=90,
                  probed_by="host.gc"),),
    spell=_spell,
    rules=(Rule("host.gc", host_gc, example=_example),),
    quick_probe=_quick,
    tune_context=_tune_context,
)
