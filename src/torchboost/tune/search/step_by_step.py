"""Step-by-step search: pull one lever at a time, keep it only if faster and still correct.

The search is a pure function of its measurements: it takes a ``measure(settings,
repeat) -> TrialResult`` callable, so it is tested with a fake in milliseconds, and a
resumed run that replays recorded measurements makes the same choices.

For each lever, largest expected gain first:

1. screen its candidates one at a time, the one the doctor's measurements bound lowest
   first (``Lever.floor``), each on the settings kept before the lever; drop those that
   fail or break loss parity (held to the script's own spread when it is not reproducible);
2. confirm at once a candidate that beats the configuration kept so far beyond the noise
   floor, before any sibling is screened (:mod:`.confirm`): an in-process switch in
   alternating bursts inside one run (:mod:`.bursts`), any other in A B A B pairs until
   ``clear_pairs`` consecutive ratios agree or ``max_repeats`` run out; keep it when the
   median ratio beats ``min_gain`` and the noise floor, and (for compile) when the compile
   time pays for itself over the planned run;
3. screen a sibling only while its bound leaves it room to beat what is kept; one confirmed
   faster replaces it. When no candidate beat the incumbent in screening, the fastest is
   confirmed the same way.

The budget keeps the end-to-end check's time (``run_search``'s ``reserve``): no trial starts
that would run into it.

Memory levers come first, and only while the baseline peaks over the memory limit
(:mod:`torchboost.tune.search.memory_limit`): the first that brings the peak under it is kept,
whatever its time cost. Any candidate that peaks over the limit is rejected (``over_memory``).

Last, an interaction pass: a coupled lever's runners-up (loader workers x threads), each with
the exact levers correct but not kept alone, screened and confirmed the same way.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from torchboost.config import Overlay
from torchboost.tune.search.decision import Decision, Status, TuneOutcome, WaterfallStep, compile_break_even
from torchboost.tune.search.interaction import INTERACTION, INTERACTION_TITLE, interaction_lever, retry_lever
from torchboost.tune.search.levers import Lever, TuneContext
from torchboost.tune.search.probe_order import lever_measurement, why_not_tried
from torchboost.tune.search.pairs import Measure, Screened
from torchboost.tune.search.repaid import cannot_pay_off
from torchboost.tune.search.parity import ParityVerdict
from torchboost.tune.search.search_options import SearchOptions
from torchboost.tune.search.confirm import Confirming
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["Decision", "SearchOptions", "Status", "TuneOutcome", "WaterfallStep", "run_search", "compile_break_even",
           "INTERACTION", "INTERACTION_TITLE"]

Settings = Overlay


class _Search(Confirming):
    """One search: the levers pulled in turn on top of the incumbent (:class:`Confirming`)."""

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
            proposals = lever.propose(self.incumbent, context)
            if not proposals:
                continue
            if self.out_of_budget_for(proposals[0], lever):
                self.stopped = True
                break
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
        """Screen the proposals one at a time, the lowest bound first (:meth:`_ordered`), each
        on the settings kept before the lever. One that beats the configuration kept so far
        beyond the noise floor in screening is confirmed at once, before any sibling is
        screened; a sibling is then screened only where its bound leaves it room to beat
        what is kept (:meth:`_no_room`), and one confirmed faster replaces the other. When
        none beats it in screening, the fastest is confirmed."""
        base, won, runners = self.incumbent, None, []
        for change in self._ordered(lever, proposals):
            if self.stopped or self.out_of_budget_for(change, lever):
                self.stopped = True
                break
            no_room = self._no_room(lever, change)
            if no_room is not None:
                self.record(lever, change, Status.SKIPPED, no_room)
                continue
            if self._switches_here(lever, change) and self.incumbent == base:
                decided, kept = self._burst_screen(lever, change, won)
                won = kept or won
                if decided:
                    continue
            screened = self._screen_one(lever, base, change)
            if screened is None:
                continue
            self.screened.setdefault(lever.id, []).append((screened.ms, change))
            if screened.ms >= self.incumbent_ms * self.threshold:
                runners.append(screened)
            elif self._settle(lever, screened, won):
                won = screened
        if won is not None:
            self._screened_out(lever, runners, won, "kept")
        elif runners:
            best = min(runners, key=lambda s: s.ms)
            self._screened_out(lever, [r for r in runners if r is not best], best, "in screening")
            self._settle(lever, best, None)

    def _ordered(self, lever: Lever, proposals: list[Settings]) -> list[Settings]:
        """The proposals lowest bound first (``Lever.floor``: the doctor's measurements), the
        lever's own order among equals and for those it cannot bound."""
        if lever.floor is None:
            return list(proposals)
        floors = [lever.floor(change, self.context) for change in proposals]
        return [change for _, _, change in sorted(
            ((bound[0] if bound is not None else 0.0), i, change) for i, (change, bound) in enumerate(zip(proposals, floors)))]

    def _no_room(self, lever: Lever, change: Settings) -> str | None:
        """Why ``change`` is not screened: its bound (``Lever.floor``) cannot beat the
        configuration kept so far beyond the noise floor; None when it can, or is unbounded."""
        bound = lever.floor(change, self.context) if lever.floor is not None else None
        if bound is None or bound[0] < self.incumbent_ms * self.threshold:
            return None
        kept = "the baseline's" if not self.incumbent else "the configuration kept so far's"
        return (f"not screened: it cannot step in less than {bound[0]:.1f} ms ({bound[1]}), and "
                f"{kept} {self.incumbent_ms:.1f} ms/step needs under {self.incumbent_ms * self.threshold:.1f} ms")

    def _screened_out(self, lever: Lever, runners: list[Screened], best: Screened, how: str) -> None:
        """Record the ``runners`` a faster candidate of the lever (``best``) left behind."""
        for other in runners:
            self.record(lever, other.change, Status.SCREENED_OUT,
                        f"{other.ms:.1f} ms/step in screening, against {best.ms:.1f} ms for "
                        f"{describe_settings(best.change)} ({how})",
                        ratio=other.ms / self.incumbent_ms, ms_per_step=other.ms,
                        peak_memory_bytes=other.result.peak_memory_bytes)

    def _screen(self, lever: Lever, proposals: list[Settings]) -> list[Screened]:
        """Each proposal screened once on top of the incumbent (:meth:`_screen_one`): the ones
        that ran, kept parity and stayed under the memory limit."""
        survivors: list[Screened] = []
        for change in proposals:
            if self.run.out_of_budget():
                self.stopped = True
                break
            screened = self._screen_one(lever, self.incumbent, change)
            if screened is not None:
                survivors.append(screened)
        self.screened[lever.id] = [(s.ms, s.change) for s in survivors]
        return survivors

    def _screen_one(self, lever: Lever, base: Settings, change: Settings, *, early_stop: bool = True) -> Screened | None:
        """Measure ``change`` once on ``base`` (the settings kept before its lever); record it
        when it fails, breaks parity or peaks over the memory limit (None), else return it. A
        memory lever runs in full: its time cost is not a reason to stop it; so does a
        candidate whose speed bursts already decided (``early_stop`` False)."""
        slower_than_ms = None if lever.for_memory or not early_stop else self.options.early_stop * self.incumbent_ms
        settings = base | change
        result = self.run(settings, slower_than_ms=slower_than_ms)
        again = result.ok and result.stopped_early and self._busy(result) and not self.run.out_of_budget()
        if again:
            result = self.run(settings, slower_than_ms=slower_than_ms)
        peak = result.peak_memory_bytes
        if result.ok and result.stopped_early:
            self.record(lever, change, Status.SLOWER, self._stopped_words(result, again),
                        ratio=result.ms_per_step / self.incumbent_ms, ms_per_step=result.ms_per_step,
                        peak_memory_bytes=peak)
            return None
        if not result.ok:
            self.record(lever, change, Status.FAILED, result.error or "the trial failed", peak_memory_bytes=peak)
            return None
        verdict = self._judge(lever, result)
        if not verdict.ok:  # incorrect, or too noisy to tell (an unseeded script's own spread)
            self.record(lever, change, Status(verdict.rejected_as), verdict.detail, ms_per_step=result.ms_per_step,
                        peak_memory_bytes=peak)
            return None
        over = self.memory.over(peak, lever.for_memory)
        if over is not None:
            self.record(lever, change, Status.OVER_MEMORY, over, ratio=result.ms_per_step / self.incumbent_ms,
                        ms_per_step=result.ms_per_step, peak_memory_bytes=peak)
            return None
        return Screened(result.ms_per_step, change, result, settings)

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



def run_search(
    levers: list[Lever],
    context: TuneContext,
    measure: Measure,
    options: SearchOptions = SearchOptions(),
    *,
    clock: Callable[[], float] = time.monotonic,
    on_decision: Callable[[Decision], None] | None = None,
    reserve: Callable[[TrialResult], float] | None = None,
) -> TuneOutcome:
    """Measure the baseline, then try each lever in order; see the module docstring.
    ``reserve``: the seconds the end-to-end check will take, from the baseline's trial: kept
    back before ``options.deadline_s``, never spent on a trial."""
    search = _Search(measure, options, clock, on_decision, context.memory_limit_bytes)
    error = search.baseline_error()
    if error is None and reserve is not None:
        search.run.keep_back(reserve(search.baseline))
    if error is None:
        search.measure_noise()
        search.pull_levers(levers, context)
    return search.outcome(error)
