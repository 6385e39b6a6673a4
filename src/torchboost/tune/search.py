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
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from torchboost.config import Overlay
from torchboost.tune.decision import Decision, Status, TuneOutcome, WaterfallStep, compile_break_even
from torchboost.tune.levers import Lever, TuneContext
from torchboost.tune.parity import EXACT, REDUCED, STATISTICAL, ParityVerdict, check_parity
from torchboost.tune.trial_result import TrialResult, describe_settings

__all__ = ["Decision", "SearchOptions", "Status", "TuneOutcome", "WaterfallStep", "run_search", "compile_break_even",
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
    kept = {d.lever: d.settings for d in decisions if d.status is Status.KEPT}
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
              if d.status is Status.REJECTED and d.ratios and d.ratio is not None and d.ratio < 1.0
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

    def elapsed_s(self) -> float:
        return self._clock() - self.start

    def __call__(self, settings: Settings) -> TrialResult:
        key = describe_settings(settings)
        repeat = self._counts.get(key, 0)
        self._counts[key] = repeat + 1
        self.trials += 1
        return self._measure(Overlay(settings), repeat)


class _Screened(NamedTuple):
    """A candidate that ran and kept parity in screening."""

    ms: float
    change: Settings
    result: TrialResult


@dataclass
class _Pairs:
    """The A/B pairs confirming one candidate; the first ratio is the screening one."""

    ratios: list[float]
    incumbent_ms: list[float]
    candidate_ms: list[float]
    count: int = 0
    """Fresh pairs measured (the screening ratio is not one)."""
    failure: tuple[Status, str] | None = None

    def add(self, incumbent_ms: float, candidate_ms: float) -> None:
        self.count += 1
        self.incumbent_ms.append(incumbent_ms)
        self.candidate_ms.append(candidate_ms)
        self.ratios.append(candidate_ms / incumbent_ms)

    def settled(self, clear_pairs: int, threshold: float) -> bool:
        """The last ``clear_pairs`` ratios (after one fresh pair at least) agree on the verdict."""
        recent = self.ratios[-clear_pairs:]
        return bool(self.count) and len(recent) == clear_pairs and (
            all(r < threshold for r in recent) or all(r >= threshold for r in recent))


class _Search:
    """One search: the incumbent kept so far, and every decision made on the way there."""

    def __init__(self, measure: Measure, options: SearchOptions, clock: Callable[[], float],
                 on_decision: Callable[[Decision], None] | None):
        self.options = options
        self.run = _Runner(measure, options, clock)
        self.on_decision = on_decision
        self.threshold = 1.0 - options.min_gain
        """A candidate is kept when its median ratio is below this."""
        self.decisions: list[Decision] = []
        self.baseline = self.run(Overlay())
        self.incumbent: Settings = Overlay()
        self.incumbent_ms = self.baseline.ms_per_step
        self.reference = self.baseline.losses
        """Losses of the configuration kept so far: after bf16 is kept, an fp32-exact lever is
        held to the bf16 run's losses (and to the baseline's trend), not to fp32's."""
        self.waterfall: list[WaterfallStep] = []
        self.stopped = False
        self.screened: dict[str, list[tuple[float, Settings]]] = {}
        """Per lever: the correct candidates' screening times, for the interaction pass."""

    def baseline_error(self) -> str | None:
        """Why the search cannot start (the baseline failed, or its loss is not finite)."""
        if not self.baseline.ok:
            return f"the baseline run failed: {self.baseline.error}"
        losses = self.baseline.losses
        bad = next((i for i, x in enumerate(losses) if not math.isfinite(x)), None)
        if bad is not None:
            return (f"the script's own loss is {losses[bad]} at step {bad}: "
                    "fix that before tuning (no candidate can be checked against it)")
        return None

    def outcome(self, error: str | None) -> TuneOutcome:
        if error is not None:
            return TuneOutcome(self.baseline, Overlay(), [], self.decisions, self.run.trials, self.run.elapsed_s(),
                               error=error)
        return TuneOutcome(self.baseline, self.incumbent, self.waterfall, self.decisions, self.run.trials,
                           self.run.elapsed_s(), stopped_by_budget=self.stopped)

    def record(self, lever: Lever, change: Settings, status: Status, reason: str, **measured: Any) -> None:
        """A decision on one candidate of ``lever``, in the words a report needs."""
        decision = Decision(lever.id, change, status, reason, **measured, title=lever.title,
                            subject=lever.subject(change) if lever.subject is not None else lever.title,
                            reduced_precision=lever.parity == REDUCED, amortised=lever.is_compile)
        self.decisions.append(decision)
        if self.on_decision is not None:
            self.on_decision(decision)

    def pull_levers(self, levers: list[Lever], context: TuneContext) -> None:
        """Each lever in turn, then the interaction pass."""
        self.waterfall.append(WaterfallStep("baseline", Overlay(), self.incumbent_ms, 1.0, 0.0))
        for lever in levers:
            if self.run.out_of_budget():
                self.stopped = True
                break
            proposals = lever.propose(self.incumbent, context)
            if proposals and not self.cannot_pay_off(lever, proposals):
                self.pull(lever, proposals)
        interaction = _interaction_lever(levers, self.decisions, self.screened, self.incumbent, self.options)
        if interaction is not None and not self.stopped and not self.run.out_of_budget():
            self.pull(interaction, interaction.propose(self.incumbent, context))

    def cannot_pay_off(self, lever: Lever, proposals: list[Settings]) -> bool:
        """A compile that cannot repay even its least cost over the planned run: skipped, untried."""
        options, incumbent_ms = self.options, self.incumbent_ms
        if not lever.is_compile or options.run_steps is None:
            return False
        most_saved_s = options.run_steps * incumbent_ms * options.compile_max_gain / 1e3
        if most_saved_s >= options.compile_min_s:
            return False
        least_break_even = 1e3 * options.compile_min_s / (incumbent_ms * options.compile_max_gain)
        self.record(lever, proposals[0], Status.SKIPPED,
                    f"cannot pay off: {options.run_steps} steps x {incumbent_ms:.1f} ms save at most "
                    f"{most_saved_s:.1f} s, and a compile costs at least {options.compile_min_s:.0f} s "
                    f"(break-even at least {least_break_even:.0f} steps)",
                    break_even_steps=least_break_even)
        return True

    def pull(self, lever: Lever, proposals: list[Settings]) -> None:
        """Screen the proposals, confirm the fastest against the incumbent, keep or revert it."""
        survivors = self.screen(lever, proposals)
        if not survivors:
            return
        best = min(survivors, key=lambda s: s.ms)
        for other in survivors:
            if other.change is not best.change:
                self.record(lever, other.change, Status.REJECTED,
                            f"{other.ms:.1f} ms/step in screening, against {best.ms:.1f} ms for "
                            f"{describe_settings(best.change)}",
                            ratio=other.ms / self.incumbent_ms, ms_per_step=other.ms)
        pairs = self.confirm(lever, best)
        if pairs.failure is not None or pairs.count == 0:
            status, why = pairs.failure or (Status.REJECTED, "unconfirmed: the budget ran out before a confirming pair")
            self.record(lever, best.change, status, why, ratio=pairs.ratios[0], ratios=pairs.ratios,
                        ms_per_step=best.ms)
            if pairs.failure is None:
                self.stopped = True
            return
        self.decide(lever, best, pairs)

    def screen(self, lever: Lever, proposals: list[Settings]) -> list[_Screened]:
        """Measure each proposal once on top of the incumbent; record those that fail or
        break parity, and return the rest."""
        survivors: list[_Screened] = []
        for change in proposals:
            if self.run.out_of_budget():
                self.stopped = True
                break
            result = self.run(self.incumbent | change)
            if not result.ok:
                self.record(lever, change, Status.FAILED, result.error or "the trial failed")
                continue
            verdict = _judge(lever, result, self.baseline, self.reference)
            if not verdict.ok:
                self.record(lever, change, Status.INCORRECT, verdict.detail, ms_per_step=result.ms_per_step)
                continue
            survivors.append(_Screened(result.ms_per_step, change, result))
        self.screened[lever.id] = [(s.ms, s.change) for s in survivors]
        return survivors

    def confirm(self, lever: Lever, best: _Screened) -> _Pairs:
        """The screening ratio compares with an incumbent measured earlier; at least one
        fresh pair, run back to back, must confirm it before anything is kept."""
        candidate = self.incumbent | best.change
        pairs = _Pairs([best.ms / self.incumbent_ms], [self.incumbent_ms], [best.ms])
        while pairs.count < self.options.max_repeats and not self.run.out_of_budget():
            if pairs.settled(self.options.clear_pairs, self.threshold):
                break
            a = self.run(self.incumbent)
            b = self.run(candidate)
            pairs.failure = self.pair_failure(lever, a, b)
            if pairs.failure is not None:
                break
            pairs.add(a.ms_per_step, b.ms_per_step)
        return pairs

    def pair_failure(self, lever: Lever, a: TrialResult, b: TrialResult) -> tuple[Status, str] | None:
        """What went wrong with one pair (incumbent ``a``, candidate ``b``), if anything."""
        if not b.ok:
            return Status.FAILED, f"failed when measured again: {b.error}"
        if not a.ok:
            return Status.REJECTED, f"the incumbent failed when measured again: {a.error}"
        verdict = _judge(lever, b, self.baseline, self.reference)
        if not verdict.ok:
            return Status.INCORRECT, f"incorrect when measured again: {verdict.detail}"
        return None

    def decide(self, lever: Lever, best: _Screened, pairs: _Pairs) -> None:
        """Keep a confirmed candidate when its median ratio beats ``min_gain`` and, for
        compile, its compile time is repaid over the planned run; otherwise reject it."""
        ratio = statistics.median(pairs.ratios)
        candidate_ms = statistics.median(pairs.candidate_ms)
        n = len(pairs.ratios)
        status, reason, break_even = Status.KEPT, f"median ratio {ratio:.3f} over {n} pair(s)", None
        if ratio >= self.threshold:
            status, reason = Status.REJECTED, (f"{'slower' if ratio > 1 else 'not faster enough'}: median ratio "
                                               f"{ratio:.3f} over {n} pair(s) (needs < {self.threshold:.2f})")
        elif lever.is_compile:
            eager_ms = statistics.median(pairs.incumbent_ms)
            compile_s, run_steps = best.result.compile_s, self.options.run_steps
            break_even = compile_break_even(compile_s, eager_ms, candidate_ms)
            if run_steps is not None and break_even >= run_steps:
                status, reason = Status.REJECTED, (
                    f"compile takes {compile_s:.1f} s and saves {eager_ms - candidate_ms:.2f} ms/step: "
                    f"it pays off after {break_even:.0f} steps, the run has {run_steps}")
        if status is Status.KEPT:
            self.keep(lever, best, pairs.ratios, candidate_ms)
        self.record(lever, best.change, status, reason, ratio=ratio, ratios=pairs.ratios, ms_per_step=candidate_ms,
                    break_even_steps=break_even)

    def keep(self, lever: Lever, best: _Screened, ratios: list[float], candidate_ms: float) -> None:
        """The candidate becomes the incumbent, and the waterfall gains its bar."""
        self.incumbent = self.incumbent | best.change
        self.incumbent_ms = candidate_ms
        self.reference = best.result.losses
        speedup = self.waterfall[-1].speedup / statistics.median(ratios)
        self.waterfall.append(WaterfallStep(f"+ {lever.title}", self.incumbent,
                                            self.baseline.ms_per_step / speedup, speedup, max(ratios) - min(ratios)))


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
    search = _Search(measure, options, clock, on_decision)
    error = search.baseline_error()
    if error is None:
        search.pull_levers(levers, context)
    return search.outcome(error)
