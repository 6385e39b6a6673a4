"""Confirming a screened candidate against the configuration kept so far, and deciding it.

A candidate that ran and kept parity in screening (:class:`~torchboost.tune.search.pairs.Screened`)
is confirmed before anything is kept: an in-process switch (a lever the doctor's quick
probes time) in alternating bursts inside one run of the incumbent (:mod:`.bursts`), any
other in A/B pairs of runs, back to back, until the pairs agree or run out. The decision
keeps it when its median ratio clears the noise floor and the least gain, and its fixed
cost is repaid over the planned run (:mod:`.repaid`); a candidate kept in place of a
sibling of the same lever replaces it.
"""

from __future__ import annotations

import statistics

from torchboost.config import Overlay
from torchboost.tune.search.bursts import burst_decision, more_bursts, plan_bursts
from torchboost.tune.search.decision import Status
from torchboost.tune.search.levers import Lever
from torchboost.tune.search.pairs import Pairs, Screened
from torchboost.tune.search.probe_order import lever_measurement
from torchboost.tune.search.repaid import repaid
from torchboost.tune.search.screening import Screening
from torchboost.tune.search.search_state import SearchState
from torchboost.tune.trials.trial_length import BURST_TRIAL_STEPS, BURST_WARMUP
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["Confirmation"]

Settings = Overlay


class Confirmation:
    """The confirmation and decision of one screened candidate at a time, on the search's
    state (:class:`SearchState`); ``screening`` runs a candidate its bursts decided once on
    its own, so that its losses are judged as any candidate's."""

    def __init__(self, state: SearchState, screening: Screening):
        self.state = state
        self.screening = screening

    def settle(self, lever: Lever, best: Screened, kept: Screened | None) -> bool:
        """Confirm ``best`` against the configuration kept so far and decide it (in bursts
        inside one run when it is an in-process switch, else in pairs); True when it was kept.
        ``kept``: a sibling of the same lever kept before it, which it then replaces."""
        state = self.state
        if self._bursts_first(lever, best):
            decided, said, ratios = self._in_bursts(lever, best, Pairs([], [], [],
                                                                       peak_memory_bytes=best.result.peak_memory_bytes))
            if decided:
                return state.was_kept(lever, kept)
            if ratios:  # bursts that could not tell: pairs of runs, noisier still, would not either
                ratio = statistics.median(ratios)
                state.record(lever, best.change, Status.NOT_BEYOND_NOISE, said, ratio=ratio, ratios=ratios,
                             ms_per_step=state.incumbent_ms * ratio, peak_memory_bytes=best.result.peak_memory_bytes,
                             in_bursts=True)
                return False
        pairs = self.confirm(lever, best)
        if pairs.failure is not None or pairs.count == 0:
            status, why = pairs.failure or (Status.UNCONFIRMED, "the budget ran out before a confirming pair")
            state.record(lever, best.change, status, why, ratio=pairs.ratios[0], ratios=pairs.ratios,
                         ms_per_step=best.ms, peak_memory_bytes=pairs.peak_memory_bytes)
            if pairs.failure is None:
                state.stopped = True
            return False
        self._decide(lever, best, pairs)
        return state.was_kept(lever, kept)

    def _bursts_first(self, lever: Lever, best: Screened) -> bool:
        """Its first confirmation is alternating bursts in one run, not pairs of runs: an
        in-process switch (a lever the doctor's quick probes time, no fixed cost) on the
        configuration kept so far, which the measure can alternate."""
        state = self.state
        return (self.switches_here(lever, best.change) and best.settings == state.incumbent | best.change
                and (describe_settings(state.incumbent), describe_settings(best.change)) not in state.bursted)

    def switches_here(self, lever: Lever, change: Settings) -> bool:
        """``change`` is an in-process switch (no fixed cost) that the measure can alternate
        in bursts on the configuration kept so far (none on a compiled model)."""
        state = self.state
        compiled = any(d.status is Status.KEPT and d.amortised for d in state.decisions)
        return lever.switches(change) and not lever.fixed_cost and state.options.bursts and not compiled

    def burst_screen(self, lever: Lever, change: Settings, kept: Screened | None) -> tuple[bool, Screened | None]:
        """An in-process switch decided in alternating bursts before any run of its own (a
        run per candidate costs a process, minutes on a busy machine's seconds-long steps):
        slower, or no gain, is recorded with the bursts' figures and costs no run; faster is
        then run once on its own, from the script's start, so its losses are judged (and its
        memory) as any candidate's, and kept when they hold. (True, the run kept or None)
        once the bursts decided; (False, None) when they gave no ratio (the candidate is then
        screened as any other). ``kept``: a sibling kept before it, which it replaces."""
        state = self.state
        ratios, runs, error = self._burst_ratios(change)
        if not ratios:
            if runs == 0:
                state.stopped = True
                state.record(lever, change, Status.UNCONFIRMED, "the budget ran out before its alternating bursts")
                return True, None
            return False, None
        noise = state.floor.noise if state.floor.count else None
        status, said, ratio = burst_decision(ratios, state.options.min_gain, noise, runs=runs, error=error)
        candidate_ms = state.incumbent_ms * ratio
        if status is not Status.KEPT:
            state.record(lever, change, status or Status.NOT_BEYOND_NOISE, said, ratio=ratio, ratios=ratios,
                         ms_per_step=candidate_ms, in_bursts=True)
            return True, None
        # Its own run, from the script's start at the pace the bursts measured.
        own_s = state.incumbent_fixed + max(len(state.baseline.losses), state.options.trial_steps) * candidate_ms / 1e3
        if not state.run.budget.affords_trial(own_s, finishing=True):  # faster, its losses unjudged: not kept
            state.stopped = True
            state.record(lever, change, Status.UNCONFIRMED, f"{said}; the budget ran out before its own run judged "
                         "its losses", ratio=ratio, ratios=ratios, ms_per_step=candidate_ms, in_bursts=True)
            return True, None
        screened = self.screening.screen_one(lever, state.incumbent, change, early_stop=False)  # its losses, judged
        if screened is None:
            return True, None  # failed, incorrect or over memory: recorded there
        state.screened.setdefault(lever.id, []).append((screened.ms, change))
        state.keep(lever, screened, Pairs(ratios, [], [], candidate_fixed=[screened.result.fixed_s],
                                          peak_memory_bytes=screened.result.peak_memory_bytes), candidate_ms)
        state.record(lever, change, Status.KEPT, f"{said}; its own run kept the losses", ratio=ratio, ratios=ratios,
                     ms_per_step=candidate_ms, peak_memory_bytes=screened.result.peak_memory_bytes, in_bursts=True)
        state.was_kept(lever, kept)
        return True, screened

    def out_of_budget_for(self, change: Settings, lever: Lever | None = None) -> bool:
        """No trial of ``change`` starts: a burst trial (``lever`` None, or a switch here) as
        long as the typical burst trial, or before any ran, as planned (start-up, its warm-up
        and recorded steps, its bursts, at the incumbent's pace); else the typical trial."""
        state = self.state
        if lever is not None and not self.switches_here(lever, change):
            return not state.run.budget.affords_trial()
        plan = plan_bursts(change, state.incumbent_ms, state.options.trial_steps)
        planned_s = state.incumbent_fixed + (BURST_WARMUP + BURST_TRIAL_STEPS + 2 * plan.pairs * plan.steps) * (
            state.incumbent_ms / 1e3)
        return not state.run.budget.affords_burst(planned_s)

    def _burst_ratios(self, change: Settings) -> tuple[list[float], int, str | None]:
        """``change`` alternated with the configuration kept so far in bursts inside one run,
        more runs pooled while the gain is hidden by the noise (:func:`more_bursts`): the
        pairs' ratios, the burst trials run, and why the last gave none (or None)."""
        state = self.state
        plan = plan_bursts(change, state.incumbent_ms, state.options.trial_steps, state.options.min_gain)
        state.bursted.add((describe_settings(state.incumbent), describe_settings(change)))
        ratios: list[float] = []
        runs, error = 0, None
        while (not self.out_of_budget_for(change)
               and (runs == 0 or more_bursts(ratios, state.options.min_gain, runs))):
            trial = state.run(state.incumbent, bursts=plan)  # the switch on what is kept
            runs += 1
            if not trial.ok or not trial.burst_ratios:
                error = trial.burst_error or trial.error
                break
            ratios += trial.burst_ratios
        return ratios, runs, error

    def confirm(self, lever: Lever, best: Screened) -> Pairs:
        """The screening ratio compares with an incumbent measured earlier; at least one
        fresh pair, run back to back, must confirm it before anything is kept. A pair run
        while other processes loaded the machine is measured once more."""
        state = self.state
        candidate = best.settings
        pairs = Pairs([best.ms / state.incumbent_ms], [state.incumbent_ms], [best.ms],
                       incumbent_fixed=[state.incumbent_fixed], candidate_fixed=[best.result.fixed_s],
                       candidate_compile=[best.result.compile_s],
                       peak_memory_bytes=best.result.peak_memory_bytes)
        retried = False
        while pairs.count < state.options.max_repeats and state.run.budget.affords_pair():
            if pairs.settled(state.options.clear_pairs, state.threshold) and state.floor.count >= state.options.noise_repeats:
                break
            if pairs.count and self._bursts_instead(lever, best):
                break  # one fresh pair at least: the decision rests on a pair or on bursts
            a = state.incumbent_again()
            # Screening ran the candidate in full (its losses judged over every step): a pair's
            # run may stop once its steps decide the ratio to the A just measured.
            b = state.run(candidate, decide=(a.ms_per_step, 1.0 - state.threshold) if a.ok else None)
            pairs.peak_memory_bytes = max(pairs.peak_memory_bytes, b.peak_memory_bytes)
            pairs.failure = self._pair_failure(lever, a, b)
            if pairs.failure is not None:
                break
            if state.busy(a, b) and not retried:
                retried = True
                continue
            pairs.add(a.ms_per_step, b.ms_per_step, a.fixed_s, b.fixed_s, b.compile_s)
        return pairs

    def _pair_failure(self, lever: Lever, a: TrialResult, b: TrialResult) -> tuple[Status, str] | None:
        """What went wrong with one pair (incumbent ``a``, candidate ``b``), if anything."""
        state = self.state
        if not b.ok:
            return Status.FAILED, f"failed when measured again: {b.error}"
        if not a.ok:
            return Status.UNCONFIRMED, f"the incumbent failed when measured again: {a.error}"
        verdict = state.parity(lever, b.losses)
        if not verdict.ok:
            return Status(verdict.rejected_as), f"{verdict.rejected_as.replace('_', ' ')} when measured again: {verdict.detail}"
        over = state.memory.over(b.peak_memory_bytes, lever.for_memory)
        if over is not None:
            return Status.OVER_MEMORY, f"over the memory limit when measured again: {over}"
        return None

    def _decide(self, lever: Lever, best: Screened, pairs: Pairs) -> None:
        """Keep a confirmed candidate when its median ratio clears the noise floor and the
        least gain, and its fixed cost (start-up, compile) is repaid over the planned run."""
        state = self.state
        ratio = statistics.median(pairs.ratios)
        candidate_ms = statistics.median(pairs.candidate_ms)
        n = len(pairs.ratios)
        status, reason, break_even = Status.KEPT, f"median ratio {ratio:.3f} over {n} pair(s)", None
        if state.threshold > 0 and ratio > 1.0 / state.threshold:  # slower beyond the margin a gain must clear
            status, reason = Status.SLOWER, f"median ratio {ratio:.3f} over {n} pair(s)"
        elif ratio >= state.threshold:
            status, reason = Status.NOT_BEYOND_NOISE, (
                f"median ratio {ratio:.3f} over {n} pair(s); needs < {state.threshold:.3f} "
                f"(the least gain {state.options.min_gain:.0%}, the noise floor {state.floor.noise:.1%})")
        else:
            status, reason, break_even = repaid(lever, pairs, state.options.run_steps, state.floor.fixed_noise_s)
        if status is Status.NOT_BEYOND_NOISE and self._bursts_instead(lever, best):
            decided, said, _ = self._in_bursts(lever, best, pairs)
            if decided:
                return
            reason += f"; {said}"
        if status is Status.KEPT:
            state.keep(lever, best, pairs, candidate_ms)
        cold_s, warm_s = pairs.compile_costs() if lever.fixed_cost else (None, None)
        state.record(lever, best.change, status, reason, ratio=ratio, ratios=pairs.ratios, ms_per_step=candidate_ms,
                     break_even_steps=break_even, peak_memory_bytes=pairs.peak_memory_bytes,
                     compile_cold_s=cold_s, compile_warm_s=warm_s)

    def _bursts_instead(self, lever: Lever, best: Screened) -> bool:
        """Pairs of runs cannot tell here: the noise floor (once measured) is wider than the
        gain the candidate could show (the doctor's probe of it, else its screening), and it
        is an in-process switch the measure can alternate in bursts (:mod:`.bursts`)."""
        state = self.state
        if not (lever.switches(best.change) and not lever.fixed_cost and state.options.bursts and state.floor.count):
            return False
        if (describe_settings(state.incumbent), describe_settings(best.change)) in state.bursted:
            return False  # measured in bursts on this configuration already
        measured = lever_measurement(lever, state.context)
        expected = measured.ratio if measured is not None else state.incumbent_ms / best.ms
        return state.floor.noise > max(state.options.min_gain, 1.0 - 1.0 / max(expected, 1e-9))

    def _in_bursts(self, lever: Lever, best: Screened, pairs: Pairs) -> tuple[bool, str, list[float]]:
        """The candidate alternated with the incumbent in bursts inside one run, more runs
        pooled while the gain is hidden by the noise (:func:`more_bursts`); (True, "", the
        pairs' ratios) once that decided it (the decision recorded, a faster one kept), else
        (False, why, the ratios: none when no burst trial gave any)."""
        state = self.state
        ratios, runs, error = self._burst_ratios(best.change)
        if runs == 0:
            return False, "no budget was left to measure it in alternating bursts", []
        noise = state.floor.noise if state.floor.count else None
        status, said, ratio = burst_decision(ratios, state.options.min_gain, noise, runs=runs, error=error)
        if status is None:
            return False, said, ratios
        candidate_ms = state.incumbent_ms * ratio
        if status is Status.KEPT:
            state.keep(lever, best, Pairs(ratios, [], [], candidate_fixed=[best.result.fixed_s],
                                          peak_memory_bytes=pairs.peak_memory_bytes), candidate_ms)
        state.record(lever, best.change, status, said, ratio=ratio, ratios=ratios, ms_per_step=candidate_ms,
                     peak_memory_bytes=pairs.peak_memory_bytes, in_bursts=True)
        return True, "", ratios
