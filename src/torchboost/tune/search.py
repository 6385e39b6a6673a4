"""Step-by-step search: pull one lever at a time, keep it only if faster and still correct.

The search is a pure function of its measurements: it takes a ``measure(settings,
repeat) -> TrialResult`` callable, so it is tested with a fake in milliseconds, and a
resumed run that replays recorded measurements makes the same choices.

For each lever, largest expected gain first:

1. screen: measure each candidate the lever proposes once, on top of the incumbent;
   drop those that fail or break loss parity with the baseline;
2. confirm: the fastest survivor against the incumbent, measured in turn (A B A B) until
   ``clear_pairs`` consecutive ratios agree on the verdict or ``max_repeats`` run out;
3. keep it when the median ratio beats ``min_gain``, and (for compile) when the compile
   time pays for itself over the planned run; otherwise revert.

Last, an interaction pass: the runners-up of a coupled lever (loader workers x threads),
each combined with the exact levers that were correct but not kept alone, screened and
confirmed the same way. Two changes can pay only together.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from torchboost.config import Overlay
from torchboost.tune.levers import Lever, TuneContext
from torchboost.tune.parity import EXACT, STATISTICAL, ParityVerdict, check_parity
from torchboost.tune.trial_result import TrialResult, describe_settings

__all__ = ["Decision", "SearchOptions", "TuneOutcome", "WaterfallStep", "run_search", "compile_break_even",
           "INTERACTION", "INTERACTION_TITLE"]

Settings = Overlay
Measure = Callable[[Settings, int], TrialResult]


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the search; gains are fractions (0.03 = 3% faster)."""

    budget_s: float = 600.0
    """Stop starting new trials after this many seconds; keep the best so far."""
    min_gain: float = 0.03
    """A lever is kept only when it makes the step at least this much faster."""
    max_repeats: int = 3
    """Most fresh A/B pairs measured to confirm one lever (at least one always is)."""
    clear_pairs: int = 2
    """Stop confirming once this many pairs in a row agree on the verdict."""
    run_steps: int | None = None
    """Planned length of the real run in steps, for amortising compile time."""
    compile_min_s: float = 10.0
    """The least a first compile costs (seconds); on a 2-core CPU even a tiny model's
    first compile takes tens of seconds."""
    compile_max_gain: float = 0.5
    """The largest share of a step compile is assumed to save, for the pre-check."""
    interaction_margin: float = 0.2
    """A coupled lever's runner-up within this fraction of the kept choice's screening
    time (one trial each: noisy) is tried again with the exact levers that gained too
    little to be kept on their own."""
    interaction_hosts: int = 1
    """At most this many runners-up per coupled lever in the interaction pass."""


@dataclass
class Decision:
    """What happened to one candidate of one lever."""

    lever: str
    settings: Settings
    """The changes this candidate made on top of the incumbent."""
    status: str
    """"kept", "rejected" (slower, not faster enough, or not worth its compile time),
    "incorrect" (loss parity failed), "failed" (crashed), "skipped" (not applicable)."""
    reason: str
    ratio: float | None = None
    """Median step time of the candidate / incumbent (below 1 is faster)."""
    ratios: list[float] = field(default_factory=list)
    ms_per_step: float | None = None
    break_even_steps: float | None = None


@dataclass
class WaterfallStep:
    """One bar of the waterfall: the configuration after keeping one more lever."""

    label: str
    settings: Settings
    ms_per_step: float
    """The baseline's time per step divided by ``speedup``."""
    speedup: float
    """Over the baseline: the product of the kept levers' confirmed pair ratios. Each ratio
    compares runs made next to each other, so slow drift of the machine over the whole
    search does not leak into it, as it would into a ratio of far-apart medians."""
    spread: float
    """Max minus min of the pair ratios that confirmed it (0 for the baseline)."""


@dataclass
class TuneOutcome:
    """The result of a search: the winning settings and the story of how they won."""

    baseline: TrialResult
    settings: Settings
    waterfall: list[WaterfallStep]
    decisions: list[Decision]
    trials_run: int
    elapsed_s: float
    stopped_by_budget: bool = False
    error: str | None = None

    @property
    def speedup(self) -> float:
        """Baseline time per step over the final configuration's."""
        return self.waterfall[-1].speedup if self.waterfall else 1.0


def compile_break_even(compile_s: float, eager_ms: float, compiled_ms: float) -> float:
    """Steps after which compiling has paid for itself; inf when compiled is not faster."""
    saving_ms = eager_ms - compiled_ms
    return math.inf if saving_ms <= 0 else 1e3 * compile_s / saving_ms


def _judge(lever: Lever, result: TrialResult, baseline: TrialResult, reference: list[float]) -> ParityVerdict:
    """Loss parity of a candidate: against the incumbent's losses with the lever's own
    check, and, once the incumbent differs from the baseline, against the baseline's trend
    (no NaN, no divergence). Not closeness to the baseline: a kept loader change may
    legitimately reorder later epochs (persistent workers draw no new seed), and then
    every later candidate trains on that order, like the incumbent it is held to."""
    verdict = check_parity(reference, result.losses, kind=lever.parity)
    if not verdict.ok and lever.fallback_parity is not None:
        verdict = check_parity(reference, result.losses, kind=lever.fallback_parity)
    if verdict.ok and reference is not baseline.losses:
        trend = check_parity(baseline.losses, result.losses, kind=STATISTICAL)
        if not trend.ok:
            return trend
    return verdict


INTERACTION = "interaction"
"""Id of the last pass's lever: a near-miss of a coupled lever with a near-miss of another."""
INTERACTION_TITLE = "levers that pay together"


def _interaction_lever(levers: list[Lever], decisions: list[Decision], screened: dict[str, list[tuple[float, Settings]]],
                       incumbent: Settings, options: SearchOptions) -> Lever | None:
    """Two changes that each gained nothing alone may gain together: on 2 cores a second
    loader worker only pays once channels_last has freed the training process's core.
    So the coupled levers' runners-up (within ``interaction_margin`` of the kept choice in
    screening, same knobs) are tried once more, each combined with every exact lever that
    was correct and faster in its pairs, but not by enough to be kept alone. None when
    there is nothing to combine."""
    by_id = {lever.id: lever for lever in levers}
    kept = {d.lever: d.settings for d in decisions if d.status == "kept"}
    near: list[Settings] = []
    for lever_id, results in screened.items():
        lever = by_id.get(lever_id)
        if lever is None or not lever.coupled or lever_id not in kept or not results:
            continue
        best_ms = min(ms for ms, _ in results)
        near += [change for ms, change in sorted(results, key=lambda item: item[0])
                 if change != kept[lever_id] and change.keys() == kept[lever_id].keys()
                 and ms <= best_ms * (1 + options.interaction_margin)][: options.interaction_hosts]
    missed = [d.settings for d in decisions
              if d.status == "rejected" and d.ratios and d.ratio is not None and d.ratio < 1.0
              and by_id.get(d.lever) is not None and by_id[d.lever].parity == EXACT
              and not by_id[d.lever].coupled and not by_id[d.lever].is_compile]
    proposals = [host | other for host in near for other in missed
                 if not set(host) & set(other) and incumbent | host | other != incumbent]
    if not proposals:
        return None
    return Lever(INTERACTION, INTERACTION_TITLE, EXACT, lambda inc, ctx: proposals,
                 fallback_parity=STATISTICAL)


class _Runner:
    """Counts repeats per settings so each measurement has a stable (settings, repeat) key."""

    def __init__(self, measure: Measure, options: SearchOptions, clock: Callable[[], float]):
        self._measure = measure
        self._counts: dict[str, int] = {}
        self._options = options
        self._clock = clock
        self.start = clock()
        self.trials = 0

    def out_of_budget(self) -> bool:
        return self._clock() - self.start >= self._options.budget_s

    def __call__(self, settings: Settings) -> TrialResult:
        key = describe_settings(settings)
        repeat = self._counts.get(key, 0)
        self._counts[key] = repeat + 1
        self.trials += 1
        return self._measure(Overlay(settings), repeat)


def run_search(
    levers: list[Lever],
    context: TuneContext,
    measure: Measure,
    options: SearchOptions = SearchOptions(),
    *,
    clock: Callable[[], float] = time.monotonic,
    on_decision: Callable[[Decision], None] | None = None,
) -> TuneOutcome:
    """Measure the baseline, then try each lever in order; see the module docstring."""
    run = _Runner(measure, options, clock)
    baseline = run(Overlay())
    decisions: list[Decision] = []

    def decide(decision: Decision) -> None:
        decisions.append(decision)
        if on_decision is not None:
            on_decision(decision)

    if not baseline.ok:
        return TuneOutcome(baseline, Overlay(), [], decisions, run.trials, clock() - run.start,
                           error=f"the baseline run failed: {baseline.error}")
    bad = next((i for i, x in enumerate(baseline.losses) if not math.isfinite(x)), None)
    if bad is not None:
        return TuneOutcome(baseline, Overlay(), [], decisions, run.trials, clock() - run.start,
                           error=f"the script's own loss is {baseline.losses[bad]} at step {bad}: "
                                 "fix that before tuning (no candidate can be checked against it)")

    incumbent: Settings = Overlay()
    incumbent_ms = baseline.ms_per_step
    reference = baseline.losses
    """Losses of the configuration kept so far: after bf16 is kept, an fp32-exact lever is
    held to the bf16 run's losses (and to the baseline's trend), not to fp32's."""
    waterfall = [WaterfallStep("baseline", Overlay(), incumbent_ms, 1.0, 0.0)]
    stopped = False
    screened: dict[str, list[tuple[float, Settings]]] = {}
    """Per lever: the correct candidates' screening times, for the interaction pass."""

    def pull(lever: Lever, proposals: list[Settings]) -> None:
        # Screen the proposals, confirm the fastest against the incumbent, keep or revert.
        nonlocal incumbent, incumbent_ms, reference, stopped
        survivors: list[tuple[float, Settings, TrialResult]] = []
        for change in proposals:
            if run.out_of_budget():
                stopped = True
                break
            candidate = incumbent | change
            result = run(candidate)
            if not result.ok:
                decide(Decision(lever.id, change, "failed", result.error or "the trial failed"))
                continue
            verdict = _judge(lever, result, baseline, reference)
            if not verdict.ok:
                decide(Decision(lever.id, change, "incorrect", verdict.detail,
                                ms_per_step=result.ms_per_step))
                continue
            survivors.append((result.ms_per_step, change, result))
        screened[lever.id] = [(ms, change) for ms, change, _ in survivors]
        if not survivors:
            return
        best_ms, change, best = min(survivors, key=lambda item: item[0])
        for other_ms, other, _ in survivors:
            if other is not change:
                decide(Decision(lever.id, other, "rejected",
                                f"{other_ms:.1f} ms/step in screening, against {best_ms:.1f} ms for "
                                f"{describe_settings(change)}",
                                ratio=other_ms / incumbent_ms, ms_per_step=other_ms))
        candidate = incumbent | change
        # The screening ratio compares with an incumbent measured earlier; at least one
        # fresh pair, run back to back, must confirm it before anything is kept.
        ratios = [best_ms / incumbent_ms]
        inc_times, cand_times = [incumbent_ms], [best_ms]
        threshold = 1.0 - options.min_gain
        failure: str | None = None
        pairs = 0
        while pairs < options.max_repeats and not run.out_of_budget():
            recent = ratios[-options.clear_pairs:]
            if pairs and len(recent) == options.clear_pairs and (
                all(r < threshold for r in recent) or all(r >= threshold for r in recent)
            ):
                break
            a = run(incumbent)
            b = run(candidate)
            if not b.ok:
                failure = f"failed when measured again: {b.error}"
                break
            if not a.ok:
                failure = f"the incumbent failed when measured again: {a.error}"
                break
            verdict = _judge(lever, b, baseline, reference)
            if not verdict.ok:
                failure = f"incorrect when measured again: {verdict.detail}"
                break
            pairs += 1
            inc_times.append(a.ms_per_step)
            cand_times.append(b.ms_per_step)
            ratios.append(b.ms_per_step / a.ms_per_step)
        if failure is not None or pairs == 0:
            status = "failed" if failure and failure.startswith("failed") else (
                "incorrect" if failure and failure.startswith("incorrect") else "rejected")
            why = failure or "unconfirmed: the budget ran out before a confirming pair"
            decide(Decision(lever.id, change, status, why, ratio=ratios[0], ratios=ratios, ms_per_step=best_ms))
            if pairs == 0 and failure is None:
                stopped = True
            return
        ratio = statistics.median(ratios)
        cand_ms = statistics.median(cand_times)
        decision = Decision(lever.id, change, "kept", "", ratio=ratio, ratios=ratios, ms_per_step=cand_ms)
        if ratio >= threshold:
            decision.status = "rejected"
            decision.reason = (
                f"{'slower' if ratio > 1 else 'not faster enough'}: median ratio {ratio:.3f} over "
                f"{len(ratios)} pair(s) (needs < {threshold:.2f})"
            )
        elif lever.is_compile:
            eager_ms = statistics.median(inc_times)
            decision.break_even_steps = compile_break_even(best.compile_s, eager_ms, cand_ms)
            if options.run_steps is not None and decision.break_even_steps >= options.run_steps:
                decision.status = "rejected"
                decision.reason = (
                    f"compile takes {best.compile_s:.1f} s and saves {eager_ms - cand_ms:.2f} ms/step: "
                    f"it pays off after {decision.break_even_steps:.0f} steps, the run has {options.run_steps}"
                )
        if decision.status == "kept":
            decision.reason = f"median ratio {ratio:.3f} over {len(ratios)} pair(s)"
            incumbent = candidate
            incumbent_ms = cand_ms
            reference = best.losses
            speedup = waterfall[-1].speedup / ratio
            waterfall.append(WaterfallStep(
                f"+ {lever.title}", candidate, baseline.ms_per_step / speedup, speedup,
                max(ratios) - min(ratios),
            ))
        decide(decision)

    for lever in levers:
        if run.out_of_budget():
            stopped = True
            break
        proposals = lever.propose(incumbent, context)
        if not proposals:
            continue
        if lever.is_compile and options.run_steps is not None:
            most_saved_s = options.run_steps * incumbent_ms * options.compile_max_gain / 1e3
            if most_saved_s < options.compile_min_s:
                least_break_even = 1e3 * options.compile_min_s / (incumbent_ms * options.compile_max_gain)
                decide(Decision(lever.id, proposals[0], "skipped",
                                f"cannot pay off: {options.run_steps} steps x {incumbent_ms:.1f} ms save at most "
                                f"{most_saved_s:.1f} s, and a compile costs at least {options.compile_min_s:.0f} s "
                                f"(break-even at least {least_break_even:.0f} steps)",
                                break_even_steps=least_break_even))
                continue
        pull(lever, proposals)

    interaction = _interaction_lever(levers, decisions, screened, incumbent, options)
    if interaction is not None and not stopped and not run.out_of_budget():
        pull(interaction, interaction.propose(incumbent, context))
    return TuneOutcome(baseline, incumbent, waterfall, decisions, run.trials, clock() - run.start,
                       stopped_by_budget=stopped)
