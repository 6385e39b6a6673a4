"""Step-by-step search: pull one lever at a time, keep it only if faster and still correct.

The search is a pure function of its measurements: it takes a ``measure(settings,
repeat) -> TrialResult`` callable, so it is tested with a fake in milliseconds, and a
resumed run that replays recorded measurements makes the same choices.

For each lever, largest expected gain first:

1. screen its candidates one at a time (:mod:`.screening`), the one the doctor's
   measurements bound lowest first (``Lever.floor``), each on the settings kept before the
   lever; drop those that fail or break loss parity (held to the script's own spread when
   it is not reproducible);
2. confirm at once a candidate that beats the configuration kept so far beyond the noise
   floor, before any sibling is screened (:mod:`.confirm`): an in-process switch in
   alternating bursts inside one run (:mod:`.bursts`), any other in A B A B pairs until
   ``clear_pairs`` consecutive ratios agree or ``max_repeats`` run out; keep it when the
   median ratio beats ``min_gain`` and the noise floor, and (for compile) when the compile
   time pays for itself over the planned run;
3. screen a sibling only while its bound leaves it room to beat what is kept; one confirmed
   faster replaces it. When no candidate beat the incumbent in screening, the fastest is
   confirmed the same way.

The tune's budget (:class:`~torchboost.tune.budget.TuneBudget`) keeps the end-to-end check's
time (``run_search``'s ``reserve``): no trial starts that would run into it, and none is
granted any of it.

Memory levers come first, and only while the baseline peaks over the memory limit
(:mod:`torchboost.tune.search.memory_limit`): the first that brings the peak under it is kept,
whatever its time cost. Any candidate that peaks over the limit is rejected (``over_memory``).

Last, an interaction pass: a coupled lever's runners-up (loader workers x threads), each with
the exact levers correct but not kept alone, screened and confirmed the same way.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

from torchboost.config import Overlay
from torchboost.tune.budget import TuneBudget
from torchboost.tune.search.decision import Decision, Status, TuneOutcome, WaterfallStep, compile_break_even
from torchboost.tune.search.interaction import INTERACTION, INTERACTION_TITLE, interaction_lever, retry_lever
from torchboost.tune.search.levers import Lever, TuneContext
from torchboost.tune.search.probe_order import lever_measurement, why_not_tried
from torchboost.tune.search.pairs import Measure, Runner, Screened
from torchboost.tune.search.repaid import cannot_pay_off
from torchboost.tune.search.search_options import SearchOptions
from torchboost.tune.search.search_state import SearchState
from torchboost.tune.search.screening import Screening
from torchboost.tune.search.confirm import Confirmation
from torchboost.tune.trials.trial_result import TrialResult

__all__ = ["Decision", "SearchOptions", "Status", "TuneOutcome", "WaterfallStep", "run_search", "compile_break_even",
           "INTERACTION", "INTERACTION_TITLE"]

Settings = Overlay


class _Search:
    """One search: the levers pulled in turn on top of the incumbent, each candidate
    screened (:class:`Screening`) then confirmed and decided (:class:`Confirmation`), all
    on one state (:class:`SearchState`)."""

    def __init__(self, state: SearchState):
        self.state = state
        self.screening = Screening(state)
        self.confirmation = Confirmation(state, self.screening)

    def pull_levers(self, levers: list[Lever]) -> None:
        """The memory levers, then each other lever in turn, then the interaction pass."""
        state, context = self.state, self.state.context
        state.waterfall.append(WaterfallStep("baseline", Overlay(), state.incumbent_ms, 1.0, 0.0, state.memory.peak))
        first = next((lever for lever in levers if not lever.for_memory and lever_measurement(lever, context)), None)
        measured = lever_measurement(first, context) if first is not None else None
        state.top = (first.id, measured.ratio, measured.label or first.title) \
            if first is not None and measured is not None else None
        self._fit_memory([lever for lever in levers if lever.for_memory])
        others = [lever for lever in levers if not lever.for_memory]
        # The switches first, each lever's in-process candidates decided in bursts, then
        # every candidate that costs a run of its own (a lever's siblings included).
        skipped = self._each_lever(others, switches=True, skipped=set())
        self._each_lever(others, switches=False, skipped=skipped)
        together = retry_lever(levers, state.decisions, state.incumbent)
        if together is not None and not state.stopped and state.run.budget.affords_trial():
            self._pull(together, together.propose(state.incumbent, context))
        interaction = interaction_lever(levers, state.decisions, state.screened, state.incumbent, state.options)
        if interaction is not None and not state.stopped and state.run.budget.affords_trial():
            self._pull(interaction, interaction.propose(state.incumbent, context))

    def _each_lever(self, levers: list[Lever], *, switches: bool, skipped: set[str]) -> set[str]:
        """One pass over ``levers`` in their order: with ``switches``, only the candidates
        that are in-process switches here; without, the others. A lever skipped (hopeless,
        or a fixed cost the run cannot repay) is skipped once, and named in the set returned
        (``skipped``: those of an earlier pass)."""
        state, context = self.state, self.state.context
        for lever in levers:
            if state.stopped or lever.id in skipped:
                continue
            proposals = [change for change in lever.propose(state.incumbent, context)
                         if self.confirmation.switches_here(lever, change) is switches]
            if not proposals:
                continue
            if self.confirmation.out_of_budget_for(proposals[0], lever):
                state.stopped = True
                break
            hopeless = why_not_tried(lever, context)
            if hopeless is not None:
                state.record(lever, proposals[0], Status.SKIPPED, hopeless)
                skipped.add(lever.id)
            elif self._cannot_pay_off(lever, proposals):
                skipped.add(lever.id)
            else:
                self._pull(lever, proposals)
        return skipped

    def _fit_memory(self, levers: list[Lever]) -> None:
        """Memory levers, before any other. While the incumbent peaks over the limit, their
        proposals in turn until one brings it under; otherwise each is skipped, untried."""
        state = self.state
        for lever in levers:
            proposals = lever.propose(state.incumbent, state.context)
            hopeless = why_not_tried(lever, state.context) if proposals else None
            if proposals and not state.memory.incumbent_over():
                state.record(lever, proposals[0], Status.SKIPPED, state.memory.nothing_over())
            elif hopeless is not None:
                state.record(lever, proposals[0], Status.SKIPPED, hopeless)
            else:
                for change in proposals:
                    survivors = self.screening.screen(lever, [change])
                    if state.stopped or (survivors and self._bring_under(lever, survivors[0])):
                        break
        if state.memory.incumbent_over():
            state.warnings.append(state.memory.still_over())

    def _bring_under(self, lever: Lever, best: Screened) -> bool:
        """A memory lever under the limit: its time cost measured in pairs, then kept however
        slow (the reason says the cost). False when it failed, broke parity or went over the
        limit when measured again."""
        state = self.state
        pairs = self.confirmation.confirm(lever, best)
        if pairs.failure is not None:
            status, why = pairs.failure
            state.record(lever, best.change, status, why, ratio=pairs.ratios[0], ratios=pairs.ratios,
                         ms_per_step=best.ms, peak_memory_bytes=pairs.peak_memory_bytes)
            return False
        ratio, candidate_ms = statistics.median(pairs.ratios), statistics.median(pairs.candidate_ms)
        reason = state.memory.brought_under(pairs.peak_memory_bytes, ratio, len(pairs.ratios))
        state.keep(lever, best, pairs, candidate_ms)
        state.record(lever, best.change, Status.KEPT, reason, ratio=ratio, ratios=pairs.ratios,
                     ms_per_step=candidate_ms, peak_memory_bytes=pairs.peak_memory_bytes)
        return True

    def _cannot_pay_off(self, lever: Lever, proposals: list[Settings]) -> bool:
        """A fixed cost (a compile) that cannot be repaid over the planned run: skipped, untried."""
        cannot = cannot_pay_off(lever, self.state.incumbent_ms, self.state.options)
        if cannot is not None:
            self.state.record(lever, proposals[0], Status.SKIPPED, cannot[0], break_even_steps=cannot[1])
        return cannot is not None

    def _pull(self, lever: Lever, proposals: list[Settings]) -> None:
        """Screen the proposals one at a time, the lowest bound first (:meth:`Screening.ordered`),
        each on the settings kept before the lever. One that beats the configuration kept so
        far beyond the noise floor in screening is confirmed at once, before any sibling is
        screened; a sibling is then screened only where its bound leaves it room to beat
        what is kept (:meth:`Screening.no_room`), and one confirmed faster replaces the
        other. When none beats it in screening, the fastest is confirmed."""
        state, screening, confirmation = self.state, self.screening, self.confirmation
        base, won, runners = state.incumbent, None, []
        for change in screening.ordered(lever, proposals):
            if state.stopped or confirmation.out_of_budget_for(change, lever):
                state.stopped = True
                break
            no_room = screening.no_room(lever, change)
            if no_room is not None:
                state.record(lever, change, Status.SKIPPED, no_room)
                continue
            if confirmation.switches_here(lever, change) and state.incumbent == base:
                decided, kept = confirmation.burst_screen(lever, change, won)
                won = kept or won
                if decided:
                    continue
            screened = screening.screen_one(lever, base, change)
            if screened is None:
                continue
            state.screened.setdefault(lever.id, []).append((screened.ms, change))
            if screened.ms >= state.incumbent_ms * state.threshold:
                runners.append(screened)
            elif confirmation.settle(lever, screened, won):
                won = screened
        if won is not None:
            screening.screened_out(lever, runners, won, "kept")
        elif runners:
            best = min(runners, key=lambda s: s.ms)
            screening.screened_out(lever, [r for r in runners if r is not best], best, "in screening")
            confirmation.settle(lever, best, None)


def run_search(
    levers: list[Lever],
    context: TuneContext,
    measure: Measure,
    options: SearchOptions = SearchOptions(),
    *,
    clock: Callable[[], float] = time.monotonic,
    on_decision: Callable[[Decision], None] | None = None,
    reserve: Callable[[TrialResult, float | None], float] | None = None,
    budget: TuneBudget | None = None,
) -> TuneOutcome:
    """Measure the baseline, then try each lever in order; see the module docstring.
    ``reserve``: the seconds the end-to-end check will take, from the baseline's trial and
    the pace of the configuration kept so far (None before any change is kept): the budget
    keeps them for the check, grants no trial any of them, and is told again at each keep.
    ``budget``: the tune's time; None: one made from ``options.budget_s`` and
    ``options.deadline_s`` on ``clock``."""
    if budget is None:
        whole_s = math.inf if options.deadline_s is None else options.deadline_s
        budget = TuneBudget(options.budget_s, whole_s=whole_s, clock=clock)
    run = Runner(measure, budget)
    state = SearchState(run, run(Overlay()), options, context, on_decision)
    error = state.baseline_error()
    if error is None and reserve is not None:
        budget.keep_for_check(reserve(state.baseline, None))
        state.on_keep = lambda: budget.keep_for_check(reserve(state.baseline, state.incumbent_ms))
    if error is None:
        state.measure_noise()
        _Search(state).pull_levers(levers)
    return state.outcome(error)
