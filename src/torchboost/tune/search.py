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
from typing import Any, Callable

from torchboost.config import Overlay
from torchboost.tune.decision import Decision, Status, TuneOutcome, WaterfallStep, compile_break_even
from torchboost.tune.interaction import INTERACTION, INTERACTION_TITLE, interaction_lever
from torchboost.tune.levers import Lever, TuneContext
from torchboost.tune.pairs import Measure, Pairs, Runner, Screened
from torchboost.tune.parity import REDUCED, STATISTICAL, ParityVerdict, check_parity
from torchboost.tune.trial_result import TrialResult, describe_settings

__all__ = ["Decision", "SearchOptions", "Status", "TuneOutcome", "WaterfallStep", "run_search", "compile_break_even",
           "INTERACTION", "INTERACTION_TITLE"]

Settings = Overlay


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
    noise_repeats: int = 3
    """Extra runs of the baseline (A/A) that measure the noise floor; 0 trusts ``min_gain``."""
    noisy: float = 0.15
    """A noise floor above this (15%) makes every verdict unreliable, and the outcome says so."""
    early_stop: float = 2.0
    """A screened candidate whose first steps are this many times slower than the incumbent's
    stops early and is recorded as slower (when the measure can stop a trial)."""
    busy_pct: float = 25.0
    """Other processes' CPU load (percent of the machine) above the baseline's by more than
    this during a pair: the pair is measured again, and the decision says so if it stays."""


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


class _Search:
    """One search: the incumbent kept so far, and every decision made on the way there."""

    def __init__(self, measure: Measure, options: SearchOptions, clock: Callable[[], float],
                 on_decision: Callable[[Decision], None] | None):
        self.options = options
        self.run = Runner(measure, options.budget_s, clock)
        self.on_decision = on_decision
        self.threshold = 1.0 - options.min_gain
        """A candidate is kept when its median ratio is below this."""
        self.decisions: list[Decision] = []
        self.warnings: list[str] = []
        self.aa_ratios: list[float] = []
        self.noise = 0.0
        self.fixed_noise = 0.0
        """How much the baseline's time outside its steps varied between its A/A runs, seconds."""
        self.baseline = self.run(Overlay())
        self.incumbent: Settings = Overlay()
        self.incumbent_ms = self.baseline.ms_per_step
        self.incumbent_fixed = self.baseline.fixed_s
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

    def measure_noise(self) -> None:
        """A/A: the baseline against itself, ``noise_repeats`` times in a row. The median
        departure of those ratios from 1 is the noise floor a kept change must clear."""
        previous, fixed = self.baseline, [self.baseline.fixed_s]
        for _ in range(self.options.noise_repeats):
            if self.run.out_of_budget():
                break
            again = self.run(Overlay())
            if not again.ok:
                break
            self.aa_ratios.append(again.ms_per_step / previous.ms_per_step)
            fixed.append(again.fixed_s)
            previous = again
        # The typical departure of one A/A ratio (the median, not the worst: one outlier on a
        # shared machine would otherwise bar every change; verdicts are medians of pairs too).
        self.noise = statistics.median(abs(r - 1.0) for r in self.aa_ratios) if self.aa_ratios else 0.0
        self.fixed_noise = max(fixed) - min(fixed)
        self.threshold = 1.0 - max(self.options.min_gain, self.noise)
        if self.noise > self.options.noisy:
            self.warnings.append(
                f"the baseline measured against itself varied by {self.noise:.0%} (A/A ratios "
                f"{', '.join(f'{r:.3f}' for r in self.aa_ratios)}): the machine is too noisy for "
                "these verdicts to be reliable; tune again on a quieter machine")

    def outcome(self, error: str | None) -> TuneOutcome:
        if error is not None:
            return TuneOutcome(self.baseline, Overlay(), [], self.decisions, self.run.trials, self.run.elapsed_s(),
                               error=error)
        return TuneOutcome(self.baseline, self.incumbent, self.waterfall, self.decisions, self.run.trials,
                           self.run.elapsed_s(), stopped_by_budget=self.stopped, noise=self.noise,
                           aa_ratios=list(self.aa_ratios), warnings=list(self.warnings))

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
            hopeless = lever.hopeless(context) if lever.hopeless is not None and proposals else None
            if hopeless is not None:
                self.record(lever, proposals[0], Status.SKIPPED, hopeless)
            elif proposals and not self.cannot_pay_off(lever, proposals):
                self.pull(lever, proposals)
        interaction = interaction_lever(levers, self.decisions, self.screened, self.incumbent, self.options)
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
                self.record(lever, other.change, Status.SCREENED_OUT,
                            f"{other.ms:.1f} ms/step in screening, against {best.ms:.1f} ms for "
                            f"{describe_settings(best.change)}",
                            ratio=other.ms / self.incumbent_ms, ms_per_step=other.ms)
        pairs = self.confirm(lever, best)
        if pairs.failure is not None or pairs.count == 0:
            status, why = pairs.failure or (Status.UNCONFIRMED, "the budget ran out before a confirming pair")
            self.record(lever, best.change, status, why, ratio=pairs.ratios[0], ratios=pairs.ratios,
                        ms_per_step=best.ms)
            if pairs.failure is None:
                self.stopped = True
            return
        self.decide(lever, best, pairs)

    def screen(self, lever: Lever, proposals: list[Settings]) -> list[Screened]:
        """Measure each proposal once on top of the incumbent; record those that fail or
        break parity, and return the rest."""
        survivors: list[Screened] = []
        for change in proposals:
            if self.run.out_of_budget():
                self.stopped = True
                break
            result = self.run(self.incumbent | change, slower_than_ms=self.options.early_stop * self.incumbent_ms)
            if result.ok and result.stopped_early:
                self.record(lever, change, Status.SLOWER,
                            f"stopped after {len(result.step_ms)} steps: {result.ms_per_step:.1f} ms/step, over "
                            f"{self.options.early_stop:g}x the {self.incumbent_ms:.1f} ms of the configuration kept so far",
                            ratio=result.ms_per_step / self.incumbent_ms, ms_per_step=result.ms_per_step)
                continue
            if not result.ok:
                self.record(lever, change, Status.FAILED, result.error or "the trial failed")
                continue
            verdict = _judge(lever, result, self.baseline, self.reference)
            if not verdict.ok:
                self.record(lever, change, Status.INCORRECT, verdict.detail, ms_per_step=result.ms_per_step)
                continue
            survivors.append(Screened(result.ms_per_step, change, result))
        self.screened[lever.id] = [(s.ms, s.change) for s in survivors]
        return survivors

    def confirm(self, lever: Lever, best: Screened) -> Pairs:
        """The screening ratio compares with an incumbent measured earlier; at least one
        fresh pair, run back to back, must confirm it before anything is kept. A pair run
        while other processes loaded the machine is measured once more."""
        candidate = self.incumbent | best.change
        pairs = Pairs([best.ms / self.incumbent_ms], [self.incumbent_ms], [best.ms],
                       incumbent_fixed=[self.incumbent_fixed], candidate_fixed=[best.result.fixed_s])
        retried = False
        while pairs.count < self.options.max_repeats and not self.run.out_of_budget():
            if pairs.settled(self.options.clear_pairs, self.threshold):
                break
            a = self.run(self.incumbent)
            b = self.run(candidate)
            pairs.failure = self.pair_failure(lever, a, b)
            if pairs.failure is not None:
                break
            if self.busy(a, b) and not retried:
                retried = True
                continue
            pairs.add(a.ms_per_step, b.ms_per_step, a.fixed_s, b.fixed_s)
        return pairs

    def busy(self, *results: TrialResult) -> bool:
        """Other processes took more of the machine than during the baseline; warned once."""
        load = max(r.load_pct for r in results)
        if load - self.baseline.load_pct <= self.options.busy_pct:
            return False
        warning = (f"other processes used up to {load:.0f}% of the machine during some trials (baseline: "
                   f"{self.baseline.load_pct:.0f}%): those pairs were measured again, but verdicts may be off")
        if warning not in self.warnings:
            self.warnings.append(warning)
        return True

    def pair_failure(self, lever: Lever, a: TrialResult, b: TrialResult) -> tuple[Status, str] | None:
        """What went wrong with one pair (incumbent ``a``, candidate ``b``), if anything."""
        if not b.ok:
            return Status.FAILED, f"failed when measured again: {b.error}"
        if not a.ok:
            return Status.UNCONFIRMED, f"the incumbent failed when measured again: {a.error}"
        verdict = _judge(lever, b, self.baseline, self.reference)
        if not verdict.ok:
            return Status.INCORRECT, f"incorrect when measured again: {verdict.detail}"
        return None

    def decide(self, lever: Lever, best: Screened, pairs: Pairs) -> None:
        """Keep a confirmed candidate when its median ratio clears the noise floor and the
        least gain, and its fixed cost (start-up, compile) is repaid over the planned run."""
        ratio = statistics.median(pairs.ratios)
        candidate_ms = statistics.median(pairs.candidate_ms)
        n = len(pairs.ratios)
        status, reason, break_even = Status.KEPT, f"median ratio {ratio:.3f} over {n} pair(s)", None
        if ratio > 1.0 / self.threshold:  # slower beyond the same margin a gain must clear
            status, reason = Status.SLOWER, f"median ratio {ratio:.3f} over {n} pair(s)"
        elif ratio >= self.threshold:
            status, reason = Status.NOT_BEYOND_NOISE, (
                f"median ratio {ratio:.3f} over {n} pair(s); needs < {self.threshold:.3f} "
                f"(the least gain {self.options.min_gain:.0%}, the noise floor {self.noise:.1%})")
        else:
            status, reason, break_even = self.repaid(lever, best, pairs, candidate_ms)
        if status is Status.KEPT:
            self.keep(lever, best, pairs, candidate_ms)
        self.record(lever, best.change, status, reason, ratio=ratio, ratios=pairs.ratios, ms_per_step=candidate_ms,
                    break_even_steps=break_even)

    def repaid(self, lever: Lever, best: Screened, pairs: Pairs,
               candidate_ms: float) -> tuple[Status, str, float | None]:
        """Whether what a faster step saves over the planned run repays the fixed cost the
        change adds: compile's first-call time, or any start-up it costs (worker start, the
        hand-over's memory manager), measured as a trial's time outside its steps."""
        ratio, n, run_steps = statistics.median(pairs.ratios), len(pairs.ratios), self.options.run_steps
        eager_ms = statistics.median(pairs.incumbent_ms)
        # Fixed costs vary from run to run too: only what exceeds the baseline's own spread counts.
        extra_s = statistics.median(pairs.candidate_fixed) - statistics.median(pairs.incumbent_fixed) - self.fixed_noise
        if lever.is_compile:
            extra_s = max(extra_s, best.result.compile_s)
        kept = f"median ratio {ratio:.3f} over {n} pair(s)"
        if extra_s <= 0:
            return Status.KEPT, kept, 0.0 if lever.is_compile else None
        break_even = compile_break_even(extra_s, eager_ms, candidate_ms)
        if run_steps is not None and break_even >= run_steps:
            what = "compile takes" if lever.is_compile else "it adds"
            return Status.NOT_REPAID, (
                f"{what} {extra_s:.1f} s and saves {eager_ms - candidate_ms:.2f} ms/step: "
                f"it pays off after {break_even:.0f} steps, the run has {run_steps}"), break_even
        return Status.KEPT, f"{kept}; its {extra_s:.1f} s fixed cost pays off after {break_even:.0f} steps", break_even

    def keep(self, lever: Lever, best: Screened, pairs: Pairs, candidate_ms: float) -> None:
        """The candidate becomes the incumbent, and the waterfall gains its bar."""
        ratios = pairs.ratios
        self.incumbent = self.incumbent | best.change
        self.incumbent_ms = candidate_ms
        self.incumbent_fixed = statistics.median(pairs.candidate_fixed)
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
        search.measure_noise()
        search.pull_levers(levers, context)
    return search.outcome(error)
