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
from torchboost.tune.search.parity import ParityVerdict, judge
from torchboost.tune.search.probe_order import lever_measurement
from torchboost.tune.search.repaid import repaid
from torchboost.tune.search.search_state import SearchState
from torchboost.tune.trials.trial_length import BURST_TRIAL_STEPS, BURST_WARMUP
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["Confirming"]

Settings = Overlay


class Confirming(SearchState):
    """The search's confirmation and decision of one screened candidate at a time."""

    def _settle(self, lever: Lever, best: Screened, kept: Screened | None) -> bool:
        """Confirm ``best`` against the configuration kept so far and decide it (in bursts
        inside one run when it is an in-process switch, else in pairs); True when it was kept.
        ``kept``: a sibling of the same lever kept before it, which it then replaces."""
        if self._bursts_first(lever, best):
            decided, said, ratios = self._in_bursts(lever, best, Pairs([], [], [],
                                                                       peak_memory_bytes=best.result.peak_memory_bytes))
            if decided:
                return self._was_kept(lever, kept)
            if ratios:  # bursts that could not tell: pairs of runs, noisier still, would not either
                ratio = statistics.median(ratios)
                self.record(lever, best.change, Status.NOT_BEYOND_NOISE, said, ratio=ratio, ratios=ratios,
                            ms_per_step=self.incumbent_ms * ratio, peak_memory_bytes=best.result.peak_memory_bytes,
                            in_bursts=True)
                return False
        pairs = self._confirm(lever, best)
        if pairs.failure is not None or pairs.count == 0:
            status, why = pairs.failure or (Status.UNCONFIRMED, "the budget ran out before a confirming pair")
            self.record(lever, best.change, status, why, ratio=pairs.ratios[0], ratios=pairs.ratios,
                        ms_per_step=best.ms, peak_memory_bytes=pairs.peak_memory_bytes)
            if pairs.failure is None:
                self.stopped = True
            return False
        self._decide(lever, best, pairs)
        return self._was_kept(lever, kept)

    def _was_kept(self, lever: Lever, kept: Screened | None) -> bool:
        """The last decision kept its candidate: a sibling kept before it (``kept``) is
        marked replaced, and its bar of the waterfall gives way to the new one."""
        last = self.decisions[-1]
        if last.status is not Status.KEPT or last.lever != lever.id:
            return False
        if kept is not None:
            earlier = next(d for d in reversed(self.decisions[:-1])
                           if d.lever == lever.id and d.status is Status.KEPT)
            earlier.status = Status.REPLACED
            earlier.reason += f"; replaced by {describe_settings(last.settings)}, confirmed faster than it"
            self.waterfall.pop(-2)
        return True

    def _bursts_first(self, lever: Lever, best: Screened) -> bool:
        """Its first confirmation is alternating bursts in one run, not pairs of runs: an
        in-process switch (a lever the doctor's quick probes time, no fixed cost) on the
        configuration kept so far, which the measure can alternate."""
        return (self._switches_here(lever, best.change) and best.settings == self.incumbent | best.change
                and (describe_settings(self.incumbent), describe_settings(best.change)) not in self.bursted)

    def _switches_here(self, lever: Lever, change: Settings) -> bool:
        """``change`` is an in-process switch (no fixed cost) that the measure can alternate
        in bursts on the configuration kept so far (none on a compiled model)."""
        compiled = any(d.status is Status.KEPT and d.amortised for d in self.decisions)
        return lever.switches(change) and not lever.fixed_cost and self.run.takes_bursts and not compiled

    def _burst_screen(self, lever: Lever, change: Settings, kept: Screened | None) -> tuple[bool, Screened | None]:
        """An in-process switch decided in alternating bursts before any run of its own (a
        run per candidate costs a process, minutes on a busy machine's seconds-long steps):
        slower, or no gain, is recorded with the bursts' figures and costs no run; faster is
        then run once on its own, from the script's start, so its losses are judged (and its
        memory) as any candidate's, and kept when they hold. (True, the run kept or None)
        once the bursts decided; (False, None) when they gave no ratio (the candidate is then
        screened as any other). ``kept``: a sibling kept before it, which it replaces."""
        ratios, runs, error = self._burst_ratios(change)
        if not ratios:
            if runs == 0:
                self.stopped = True
                self.record(lever, change, Status.UNCONFIRMED, "the budget ran out before its alternating bursts")
                return True, None
            return False, None
        noise = self.floor.noise if self.floor.count else None
        status, said, ratio = burst_decision(ratios, self.options.min_gain, noise, runs=runs, error=error)
        candidate_ms = self.incumbent_ms * ratio
        if status is not Status.KEPT:
            self.record(lever, change, status or Status.NOT_BEYOND_NOISE, said, ratio=ratio, ratios=ratios,
                        ms_per_step=candidate_ms, in_bursts=True)
            return True, None
        if self.run.out_of_budget():  # faster, but its losses unjudged: not kept
            self.stopped = True
            self.record(lever, change, Status.UNCONFIRMED, f"{said}; the budget ran out before its own run judged "
                        "its losses", ratio=ratio, ratios=ratios, ms_per_step=candidate_ms, in_bursts=True)
            return True, None
        screened = self._screen_one(lever, self.incumbent, change, early_stop=False)  # its losses, judged
        if screened is None:
            return True, None  # failed, incorrect or over memory: recorded there
        self.screened.setdefault(lever.id, []).append((screened.ms, change))
        self._keep(lever, screened, Pairs(ratios, [], [], candidate_fixed=[screened.result.fixed_s],
                                          peak_memory_bytes=screened.result.peak_memory_bytes), candidate_ms)
        self.record(lever, change, Status.KEPT, f"{said}; its own run kept the losses", ratio=ratio, ratios=ratios,
                    ms_per_step=candidate_ms, peak_memory_bytes=screened.result.peak_memory_bytes, in_bursts=True)
        self._was_kept(lever, kept)
        return True, screened

    def out_of_budget_for(self, change: Settings, lever: Lever | None = None) -> bool:
        """No trial of ``change`` starts: a burst trial (``lever`` None, or a switch here) as
        long as the typical burst trial, or before any ran, as planned (start-up, its warm-up
        and recorded steps, its bursts, at the incumbent's pace); else the typical trial."""
        if lever is not None and not self._switches_here(lever, change):
            return self.run.out_of_budget()
        plan = plan_bursts(change, self.incumbent_ms, self.options.trial_steps)
        planned_s = self.incumbent_fixed + (BURST_WARMUP + BURST_TRIAL_STEPS + 2 * plan.pairs * plan.steps) * (
            self.incumbent_ms / 1e3)
        return self.run.out_of_budget(bursts=True, expected_s=planned_s)

    def _burst_ratios(self, change: Settings) -> tuple[list[float], int, str | None]:
        """``change`` alternated with the configuration kept so far in bursts inside one run,
        more runs pooled while the gain is hidden by the noise (:func:`more_bursts`): the
        pairs' ratios, the burst trials run, and why the last gave none (or None)."""
        plan = plan_bursts(change, self.incumbent_ms, self.options.trial_steps, self.options.min_gain)
        self.bursted.add((describe_settings(self.incumbent), describe_settings(change)))
        ratios: list[float] = []
        runs, error = 0, None
        while (not self.out_of_budget_for(change)
               and (runs == 0 or more_bursts(ratios, self.options.min_gain, runs))):
            trial = self.run(self.incumbent, bursts=plan)  # the switch on what is kept
            runs += 1
            if not trial.ok or not trial.burst_ratios:
                error = trial.burst_error or trial.error
                break
            ratios += trial.burst_ratios
        return ratios, runs, error

    def _confirm(self, lever: Lever, best: Screened) -> Pairs:
        """The screening ratio compares with an incumbent measured earlier; at least one
        fresh pair, run back to back, must confirm it before anything is kept. A pair run
        while other processes loaded the machine is measured once more."""
        candidate = best.settings
        pairs = Pairs([best.ms / self.incumbent_ms], [self.incumbent_ms], [best.ms],
                       incumbent_fixed=[self.incumbent_fixed], candidate_fixed=[best.result.fixed_s],
                       candidate_compile=[best.result.compile_s],
                       peak_memory_bytes=best.result.peak_memory_bytes)
        retried = False
        while pairs.count < self.options.max_repeats and not self.run.out_of_budget(trials=2):
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
            decided, said, _ = self._in_bursts(lever, best, pairs)
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
        if not (lever.switches(best.change) and not lever.fixed_cost and self.run.takes_bursts and self.floor.count):
            return False
        if (describe_settings(self.incumbent), describe_settings(best.change)) in self.bursted:
            return False  # measured in bursts on this configuration already
        measured = lever_measurement(lever, self.context)
        expected = measured.ratio if measured is not None else self.incumbent_ms / best.ms
        return self.floor.noise > max(self.options.min_gain, 1.0 - 1.0 / max(expected, 1e-9))

    def _in_bursts(self, lever: Lever, best: Screened, pairs: Pairs) -> tuple[bool, str, list[float]]:
        """The candidate alternated with the incumbent in bursts inside one run, more runs
        pooled while the gain is hidden by the noise (:func:`more_bursts`); (True, "", the
        pairs' ratios) once that decided it (the decision recorded, a faster one kept), else
        (False, why, the ratios: none when no burst trial gave any)."""
        ratios, runs, error = self._burst_ratios(best.change)
        if runs == 0:
            return False, "no budget was left to measure it in alternating bursts", []
        noise = self.floor.noise if self.floor.count else None
        status, said, ratio = burst_decision(ratios, self.options.min_gain, noise, runs=runs, error=error)
        if status is None:
            return False, said, ratios
        candidate_ms = self.incumbent_ms * ratio
        if status is Status.KEPT:
            self._keep(lever, best, Pairs(ratios, [], [], candidate_fixed=[best.result.fixed_s],
                                          peak_memory_bytes=pairs.peak_memory_bytes), candidate_ms)
        self.record(lever, best.change, status, said, ratio=ratio, ratios=ratios, ms_per_step=candidate_ms,
                    peak_memory_bytes=pairs.peak_memory_bytes, in_bursts=True)
        return True, "", ratios

    def _parity(self, lever: Lever, losses: list[float]) -> ParityVerdict:
        """``losses`` of one of ``lever``'s candidates judged against the incumbent's (:func:`judge`)."""
        return judge(lever, losses, self.baseline.losses, self.reference, repeats=self.repeats, reduced=self.reduced,
                     random_ops=self.context.random_ops)
