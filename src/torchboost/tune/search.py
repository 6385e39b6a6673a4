"""Step-by-step search: pull one lever at a time, keep it only if faster and still correct.

The search is a pure function of its measurements: it takes a ``measure(settings,
repeat) -> TrialResult`` callable, so it is tested with a fake in milliseconds, and a
resumed run that replays recorded measurements makes the same choices.

For each lever, largest expected gain first:

1. screen: measure each candidate once on top of the incumbent; drop those that fail or
   break loss parity (held to the script's own spread when it is not reproducible);
2. confirm: the fastest survivor against the incumbent, measured in turn (A B A B) until
   ``clear_pairs`` consecutive ratios agree on the verdict or ``max_repeats`` run out; on a
   machine whose A/A noise floor is wider than the gain an in-process switch could show,
   after one pair, in alternating bursts inside one run instead (:mod:`.bursts`);
3. keep it when the median ratio beats ``min_gain`` and the noise floor, and (for compile)
   when the compile time pays for itself over the planned run; otherwise revert.

Memory levers come first, and only while the baseline peaks over the memory limit
(:mod:`torchboost.tune.memory_limit`): the first that brings the peak under it is kept,
whatever its time cost. Any candidate that peaks over the limit is rejected (``over_memory``).

Last, an interaction pass: a coupled lever's runners-up (loader workers x threads), each with
the exact levers correct but not kept alone, screened and confirmed the same way.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from torchboost.config import Overlay
from torchboost.tune.decision import Decision, Status, TuneOutcome, WaterfallStep, compile_break_even
from torchboost.tune.interaction import INTERACTION, INTERACTION_TITLE, interaction_lever, retry_lever
from torchboost.tune.levers import Lever, TuneContext
from torchboost.tune.probe_order import lever_measurement, why_not_tried
from torchboost.tune.bursts import burst_decision, more_bursts, plan_bursts
from torchboost.tune.pairs import Measure, Pairs, Screened
from torchboost.tune.repaid import cannot_pay_off, repaid
from torchboost.tune.parity import ParityVerdict, judge
from torchboost.tune.search_options import SearchOptions
from torchboost.tune.search_state import SearchState
from torchboost.tune.trial_result import TrialResult, describe_settings

__all__ = ["Decision", "SearchOptions", "Status", "TuneOutcome", "WaterfallStep", "run_search", "compile_break_even",
           "INTERACTION", "INTERACTION_TITLE"]

Settings = Overlay


class _Search(SearchState):
    """One search: the levers pulled in turn on top of the incumbent (:class:`SearchState`)."""

    def pull_levers(self, levers: list[Lever], context: TuneContext) -> None:
        """The memory levers, then each other lever in turn, then the interaction pass."""
        self.waterfall.append(WaterfallStep("baseline", Overlay(), self.incumbent_ms, 1.0, 0.0, self.memory.peak))
        self.context = context
        first = next((lever for lever in levers if not lever.for_memory and lever_measurement(lever, context)), None)
        measured = lever_measurement(first, context) if first is not None else None
        self.top = (first.id, measured.ratio, measured.label or first.title) \
            if first is not None and measured is not None else None
        self._fit_memory([lever for lever in levers if lever.for_memory], context)
        for lever in levers:
            if lever.for_memory:
                continue
            if self.run.out_of_budget():
                self.stopped = True
                break
            proposals = lever.propose(self.incumbent, context)
            hopeless = why_not_tried(lever, context) if proposals else None
            if hopeless is not None:
                self.record(lever, proposals[0], Status.SKIPPED, hopeless)
            elif proposals and not self._cannot_pay_off(lever, proposals):
                self._pull(lever, proposals)
        together = retry_lever(levers, self.decisions, self.incumbent)
        if together is not None and not self.stopped and not self.run.out_of_budget():
            self._pull(together, together.propose(self.incumbent, context))
        interaction = interaction_lever(levers, self.decisions, self.screened, self.incumbent, self.options)
        if interaction is not None and not self.stopped and not self.run.out_of_budget():
            self._pull(interaction, interaction.propose(self.incumbent, context))

    def _fit_memory(self, levers: list[Lever], context: TuneContext) -> None:
        """Memory levers, before any other. While the incumbent peaks over the limit, their
        proposals in turn until one brings it under; otherwise each is skipped, untried."""
        for lever in levers:
            proposals = lever.propose(self.incumbent, context)
            hopeless = why_not_tried(lever, context) if proposals else None
            if proposals and not self.memory.incumbent_over():
                self.record(lever, proposals[0], Status.SKIPPED, self.memory.nothing_over())
            elif hopeless is not None:
                self.record(lever, proposals[0], Status.SKIPPED, hopeless)
            else:
                for change in proposals:
                    survivors = self._screen(lever, [change])
                    if self.stopped or (survivors and self._bring_under(lever, survivors[0])):
                        break
        if self.memory.incumbent_over():
            self.warnings.append(self.memory.still_over())

    def _bring_under(self, lever: Lever, best: Screened) -> bool:
        """A memory lever under the limit: its time cost measured in pairs, then kept however
        slow (the reason says the cost). False when it failed, broke parity or went over the
        limit when measured again."""
        pairs = self._confirm(lever, best)
        if pairs.failure is not None:
            status, why = pairs.failure
            self.record(lever, best.change, status, why, ratio=pairs.ratios[0], ratios=pairs.ratios,
                        ms_per_step=best.ms, peak_memory_bytes=pairs.peak_memory_bytes)
            return False
        ratio, candidate_ms = statistics.median(pairs.ratios), statistics.median(pairs.candidate_ms)
        reason = self.memory.brought_under(pairs.peak_memory_bytes, ratio, len(pairs.ratios))
        self._keep(lever, best, pairs, candidate_ms)
        self.record(lever, best.change, Status.KEPT, reason, ratio=ratio, ratios=pairs.ratios,
                    ms_per_step=candidate_ms, peak_memory_bytes=pairs.peak_memory_bytes)
        return True

    def _cannot_pay_off(self, lever: Lever, proposals: list[Settings]) -> bool:
        """A fixed cost (a compile) that cannot be repaid over the planned run: skipped, untried."""
        cannot = cannot_pay_off(lever, self.incumbent_ms, self.options)
        if cannot is not None:
            self.record(lever, proposals[0], Status.SKIPPED, cannot[0], break_even_steps=cannot[1])
        return cannot is not None

    def _pull(self, lever: Lever, proposals: list[Settings]) -> None:
        """Screen the proposals, confirm the fastest against the incumbent, keep or revert it."""
        survivors = self._screen(lever, proposals)
        if not survivors:
            return
        best = min(survivors, key=lambda s: s.ms)
        for other in survivors:
            if other.change is not best.change:
                self.record(lever, other.change, Status.SCREENED_OUT,
                            f"{other.ms:.1f} ms/step in screening, against {best.ms:.1f} ms for "
                            f"{describe_settings(best.change)}",
                            ratio=other.ms / self.incumbent_ms, ms_per_step=other.ms,
                            peak_memory_bytes=other.result.peak_memory_bytes)
        pairs = self._confirm(lever, best)
        if pairs.failure is not None or pairs.count == 0:
            status, why = pairs.failure or (Status.UNCONFIRMED, "the budget ran out before a confirming pair")
            self.record(lever, best.change, status, why, ratio=pairs.ratios[0], ratios=pairs.ratios,
                        ms_per_step=best.ms, peak_memory_bytes=pairs.peak_memory_bytes)
            if pairs.failure is None:
                self.stopped = True
            return
        self._decide(lever, best, pairs)

    def _screen(self, lever: Lever, proposals: list[Settings]) -> list[Screened]:
        """Measure each proposal once on top of the incumbent; record those that fail, break
        parity or peak over the memory limit, and return the rest. A memory lever runs in
        full: its time cost is not a reason to stop it."""
        survivors: list[Screened] = []
        for change in proposals:
            if self.run.out_of_budget():
                self.stopped = True
                break
            slower_than_ms = None if lever.for_memory else self.options.early_stop * self.incumbent_ms
            result = self.run(self.incumbent | change, slower_than_ms=slower_than_ms)
            again = result.ok and result.stopped_early and self._busy(result) and not self.run.out_of_budget()
            if again:
                result = self.run(self.incumbent | change, slower_than_ms=slower_than_ms)
            peak = result.peak_memory_bytes
            if result.ok and result.stopped_early:
                self.record(lever, change, Status.SLOWER, self._stopped_words(result, again),
                            ratio=result.ms_per_step / self.incumbent_ms, ms_per_step=result.ms_per_step,
                            peak_memory_bytes=peak)
                continue
            if not result.ok:
                self.record(lever, change, Status.FAILED, result.error or "the trial failed", peak_memory_bytes=peak)
                continue
            verdict = self._judge(lever, result)
            if not verdict.ok:  # incorrect, or too noisy to tell (an unseeded script's own spread)
                self.record(lever, change, Status(verdict.rejected_as), verdict.detail, ms_per_step=result.ms_per_step,
                            peak_memory_bytes=peak)
                continue
            over = self.memory.over(peak, lever.for_memory)
            if over is not None:
                self.record(lever, change, Status.OVER_MEMORY, over, ratio=result.ms_per_step / self.incumbent_ms,
                            ms_per_step=result.ms_per_step, peak_memory_bytes=peak)
                continue
            survivors.append(Screened(result.ms_per_step, change, result))
        self.screened[lever.id] = [(s.ms, s.change) for s in survivors]
        return survivors

    def _stopped_words(self, result: TrialResult, again: bool) -> str:
        """Why a screening trial was stopped early (``again``: the second time, the first
        having run beside a busy machine), with the load it ran beside when busy."""
        busy = (f" ({'measured twice; ' if again else ''}other processes used {result.load_pct:.0f}% of the machine)"
                if result.load_pct - self.baseline.load_pct > self.options.busy_pct else "")
        return (f"stopped after {len(result.step_ms)} steps: median {result.median_step_ms:.1f} ms/step, over "
                f"{self.options.early_stop:g}x the {self.incumbent_ms:.1f} ms of the configuration kept so far{busy}")

    def _judge(self, lever: Lever, result: TrialResult) -> ParityVerdict:
        """Loss parity of a screened candidate. The first one may come before any repeat of the
        baseline: when it fails, the baseline runs once more (a pair's A, ahead of its B) to
        learn whether the script reproduces its own losses, and the candidate is judged again."""
        verdict = self._parity(lever, result.losses)
        # Before "incorrect": the baseline's own spread from as many repeats as the A/A would
        # have given (two runs of an unseeded script can end close by chance).
        while (not verdict.ok and not self.incumbent and len(self.repeats) < self.options.noise_repeats
               and not self.run.out_of_budget()):
            if not self._incumbent_again().ok:
                return verdict
            verdict = self._parity(lever, result.losses)
        return verdict

    def _parity(self, lever: Lever, losses: list[float]) -> ParityVerdict:
        """``losses`` of one of ``lever``'s candidates judged against the incumbent's (:func:`judge`)."""
        return judge(lever, losses, self.baseline.losses, self.reference, repeats=self.repeats, reduced=self.reduced,
                     random_ops=self.context.random_ops)

    def _confirm(self, lever: Lever, best: Screened) -> Pairs:
        """The screening ratio compares with an incumbent measured earlier; at least one
        fresh pair, run back to back, must confirm it before anything is kept. A pair run
        while other processes loaded the machine is measured once more."""
        candidate = self.incumbent | best.change
        pairs = Pairs([best.ms / self.incumbent_ms], [self.incumbent_ms], [best.ms],
                       incumbent_fixed=[self.incumbent_fixed], candidate_fixed=[best.result.fixed_s],
                       candidate_compile=[best.result.compile_s],
                       peak_memory_bytes=best.result.peak_memory_bytes)
        retried = False
        while pairs.count < self.options.max_repeats and not self.run.out_of_budget():
            if pairs.settled(self.options.clear_pairs, self.threshold) and self.floor.count >= self.options.noise_repeats:
                break
            if pairs.count and self._bursts_instead(lever, best):
                break  # one fresh pair at least: the decision rests on a pair or on bursts
            a = self._incumbent_again()
            # Screening ran the candidate in full (its losses judged over every step): a pair's
            # run may stop once its steps decide the ratio to the A just measured.
            b = self.run(candidate, decide=(a.ms_per_step, 1.0 - self.threshold) if a.ok else None)
            pairs.peak_memory_bytes = max(pairs.peak_memory_bytes, b.peak_memory_bytes)
            pairs.failure = self._pair_failure(lever, a, b)
            if pairs.failure is not None:
                break
            if self._busy(a, b) and not retried:
                retried = True
                continue
            pairs.add(a.ms_per_step, b.ms_per_step, a.fixed_s, b.fixed_s, b.compile_s)
        return pairs

    def _pair_failure(self, lever: Lever, a: TrialResult, b: TrialResult) -> tuple[Status, str] | None:
        """What went wrong with one pair (incumbent ``a``, candidate ``b``), if anything."""
        if not b.ok:
            return Status.FAILED, f"failed when measured again: {b.error}"
        if not a.ok:
            return Status.UNCONFIRMED, f"the incumbent failed when measured again: {a.error}"
        verdict = self._parity(lever, b.losses)
        if not verdict.ok:
            return Status(verdict.rejected_as), f"{verdict.rejected_as.replace('_', ' ')} when measured again: {verdict.detail}"
        over = self.memory.over(b.peak_memory_bytes, lever.for_memory)
        if over is not None:
            return Status.OVER_MEMORY, f"over the memory limit when measured again: {over}"
        return None

    def _decide(self, lever: Lever, best: Screened, pairs: Pairs) -> None:
        """Keep a confirmed candidate when its median ratio clears the noise floor and the
        least gain, and its fixed cost (start-up, compile) is repaid over the planned run."""
        ratio = statistics.median(pairs.ratios)
        candidate_ms = statistics.median(pairs.candidate_ms)
        n = len(pairs.ratios)
        status, reason, break_even = Status.KEPT, f"median ratio {ratio:.3f} over {n} pair(s)", None
        if self.threshold > 0 and ratio > 1.0 / self.threshold:  # slower beyond the margin a gain must clear
            status, reason = Status.SLOWER, f"median ratio {ratio:.3f} over {n} pair(s)"
        elif ratio >= self.threshold:
            status, reason = Status.NOT_BEYOND_NOISE, (
                f"median ratio {ratio:.3f} over {n} pair(s); needs < {self.threshold:.3f} "
                f"(the least gain {self.options.min_gain:.0%}, the noise floor {self.floor.noise:.1%})")
        else:
            status, reason, break_even = repaid(lever, pairs, self.options.run_steps, self.floor.fixed_noise_s)
        if status is Status.NOT_BEYOND_NOISE and self._bursts_instead(lever, best):
            decided, said = self._in_bursts(lever, best, pairs)
            if decided:
                return
            reason += f"; {said}"
        if status is Status.KEPT:
            self._keep(lever, best, pairs, candidate_ms)
        cold_s, warm_s = pairs.compile_costs() if lever.fixed_cost else (None, None)
        self.record(lever, best.change, status, reason, ratio=ratio, ratios=pairs.ratios, ms_per_step=candidate_ms,
                    break_even_steps=break_even, peak_memory_bytes=pairs.peak_memory_bytes,
                    compile_cold_s=cold_s, compile_warm_s=warm_s)

    def _bursts_instead(self, lever: Lever, best: Screened) -> bool:
        """Pairs of runs cannot tell here: the noise floor (once measured) is wider than the
        gain the candidate could show (the doctor's probe of it, else its screening), and it
        is an in-process switch the measure can alternate in bursts (:mod:`.bursts`)."""
        if not (lever.probed_by and not lever.fixed_cost and self.run.takes_bursts and self.floor.count):
            return False
        measured = lever_measurement(lever, self.context)
        expected = measured.ratio if measured is not None else self.incumbent_ms / best.ms
        return self.floor.noise > max(self.options.min_gain, 1.0 - 1.0 / max(expected, 1e-9))

    def _in_bursts(self, lever: Lever, best: Screened, pairs: Pairs) -> tuple[bool, str]:
        """The candidate alternated with the incumbent in bursts inside one run, more runs
        pooled while the gain is hidden by the noise (:func:`more_bursts`); (True, "") once
        that decided it (the decision recorded, a faster one kept), else (False, why)."""
        plan = plan_bursts(best.change, self.incumbent_ms, self.options.trial_steps)
        ratios: list[float] = []
        runs, error = 0, None
        while not self.run.out_of_budget() and (runs == 0 or more_bursts(ratios, self.options.min_gain, runs)):
            trial = self.run(self.incumbent, bursts=plan)
            runs += 1
            if not trial.ok or not trial.burst_ratios:
                error = trial.burst_error or trial.error
                break
            ratios += trial.burst_ratios
        if runs == 0:
            return False, "no budget was left to measure it in alternating bursts"
        status, said, ratio = burst_decision(ratios, self.options.min_gain, self.floor.noise, runs=runs, error=error)
        if status is None:
            return False, said
        candidate_ms = self.incumbent_ms * ratio
        if status is Status.KEPT:
            self._keep(lever, best, Pairs(ratios, [], [], candidate_fixed=[best.result.fixed_s],
                                          peak_memory_bytes=pairs.peak_memory_bytes), candidate_ms)
        self.record(lever, best.change, status, said, ratio=ratio, ratios=ratios, ms_per_step=candidate_ms,
                    peak_memory_bytes=pairs.peak_memory_bytes)
        return True, ""


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
    search = _Search(measure, options, clock, on_decision, context.memory_limit_bytes)
    error = search.baseline_error()
    if error is None:
        search.measure_noise()
        search.pull_levers(levers, context)
    return search.outcome(error)
