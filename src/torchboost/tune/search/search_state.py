"""The search's state: the incumbent kept so far, the noise floor, the decisions made.

:class:`SearchState` holds what one search knows between its trials and keeps its books:
the baseline and the incumbent, the A/A noise floor the incumbent's repeats give, loss
parity against them, every decision and the waterfall of kept changes. Screening
(:mod:`.screening`) and confirmation (:mod:`.confirm`) act on it; the flow that pulls the
levers is :mod:`.step_by_step`'s.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from torchboost.config import Overlay
from torchboost.tune.search.bursts import burst_spread
from torchboost.tune.search.busy import too_busy, top_unmeasured
from torchboost.tune.search.decision import Decision, Status, TuneOutcome, WaterfallStep
from torchboost.tune.search.levers import Lever, TuneContext
from torchboost.tune.search.memory_limit import MemoryGate
from torchboost.tune.search.noise import NoiseFloor
from torchboost.tune.search.pairs import Pairs, Runner, Screened
from torchboost.tune.search.parity import REDUCED, ParityVerdict, judge
from torchboost.tune.search.search_options import SearchOptions
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["SearchState"]

Settings = Overlay


class SearchState:
    """One search's state: the incumbent kept so far, and every decision made on the way there."""

    def __init__(self, run: Runner, baseline: TrialResult, options: SearchOptions, context: TuneContext,
                 on_decision: Callable[[Decision], None] | None):
        self.options = options
        self.run = run
        """The trials, within the budget (the baseline was the first)."""
        self.on_decision = on_decision
        self.decisions: list[Decision] = []
        self.warnings: list[str] = []
        self._busiest = 0.0  # the most load other processes took during a trial, % of the machine
        self.floor = NoiseFloor(options.min_gain)
        """The A/A ratios of the incumbent's runs beside the candidates, and the floor they make."""
        self.baseline = baseline
        self.memory = MemoryGate(context.memory_limit_bytes, self.baseline.peak_memory_bytes)
        self.incumbent: Settings = Overlay()
        self.incumbent_ms = self.baseline.ms_per_step
        self.incumbent_fixed = self.baseline.fixed_s
        self.reference = self.baseline.losses
        self.floor.add(Overlay(), self.baseline)
        # A/A losses: reproducible or not; once bf16 is kept, exact levers get its tolerance (judge)
        self.repeats: list[list[float]] = []
        """The baseline's own repeats (A/A runs): whether the script reproduces its losses."""
        self.incumbent_repeats: list[list[float]] = []
        """The kept configuration's own repeats since it was kept, where the baseline had none
        before a change was kept (an unseeded script's first kept change judged the next
        one against one run of its own: 'incorrect', first losses 1.3% apart)."""
        self.reduced = False
        """Losses of the configuration kept so far: after bf16 is kept, an fp32-exact lever is
        held to the bf16 run's losses (and to the baseline's trend), not to fp32's."""
        self.waterfall: list[WaterfallStep] = []
        self.stopped = False
        self.top: tuple[str, float, str] | None = None
        """The first lever the doctor measured, its ratio and what it switched (for "too busy to tell")."""
        self.screened: dict[str, list[tuple[float, Settings]]] = {}
        """Per lever: the correct candidates' screening times, for the interaction pass."""
        self.context = context
        self.bursted: set[tuple[str, str]] = set()
        """(configuration kept, change) pairs already measured in alternating bursts."""
        self.on_keep: Callable[[], None] = lambda: None
        """Called after each keep (the time kept for the end-to-end check, measured again at
        the new pace: ``run_search``'s ``reserve``)."""

    def baseline_error(self) -> str | None:
        """Why the search cannot start (the baseline failed, or its loss is not finite)."""
        if not self.baseline.ok:
            failed = "did not finish" if "--budget" in (self.baseline.error or "") else "failed"
            return f"the baseline run {failed}: {self.baseline.error}"
        losses = self.baseline.losses
        bad = next((i for i, x in enumerate(losses) if not math.isfinite(x)), None)
        if bad is not None:
            return (f"the script's own loss is {losses[bad]} at step {bad}: "
                    "fix that before tuning (no candidate can be checked against it)")
        return None

    @property
    def threshold(self) -> float:
        """A candidate is kept when its median ratio is below this (the noise floor so far)."""
        return self.floor.threshold

    def measure_noise(self) -> None:
        """With ``aa_first``: the baseline against itself ``noise_repeats`` times before any
        candidate (the order before pairs). Otherwise nothing here: the pairs' A's measure it."""
        for _ in range(self.options.noise_repeats if self.options.aa_first else 0):
            if not self.run.budget.affords_trial() or not self.incumbent_again().ok:
                break

    def incumbent_again(self) -> TrialResult:
        """One more run of the incumbent (a pair's A): a point of the noise floor, and, while
        it is the baseline, one more repeat its losses are known to vary by."""
        again = self.run(self.incumbent)
        self.floor.add(self.incumbent, again)
        if again.ok:
            self.memory.peak = max(self.memory.peak, again.peak_memory_bytes)
            (self.incumbent_repeats if self.incumbent else self.repeats).append(list(again.losses))
        return again

    def own_repeats(self) -> tuple[list[float], list[list[float]]]:
        """The run whose repeats say whether the script reproduces its losses, and those
        repeats: the baseline's, unless a change was kept before the baseline was repeated;
        then the kept configuration's."""
        if not self.incumbent or self.repeats:
            return self.baseline.losses, self.repeats
        return self.reference, self.incumbent_repeats

    def parity(self, lever: Lever, losses: list[float]) -> ParityVerdict:
        """``losses`` of one of ``lever``'s candidates judged against the incumbent's (:func:`judge`)."""
        repeated, repeats = self.own_repeats()
        return judge(lever, losses, self.baseline.losses, self.reference, repeats=repeats, repeated=repeated,
                     reduced=self.reduced, random_ops=self.context.random_ops)

    def outcome(self, error: str | None) -> TuneOutcome:
        if error is not None:
            return TuneOutcome(self.baseline, Overlay(), [], self.decisions, self.run.trials, self.run.elapsed_s(),
                               error=error)
        return TuneOutcome(self.baseline, self.incumbent, self.waterfall, self.decisions, self.run.trials,
                           self.run.elapsed_s(), stopped_by_budget=self.stopped, noise=self.floor.noise,
                           aa_ratios=list(self.floor.aa_ratios), warnings=self._warnings(),
                           memory_limit_bytes=self.memory.limit, spent_s=self.run.budget.spent_s,
                           burst_trials=self.run.burst_trials)

    def _warnings(self) -> list[str]:
        options, top = self.options, self.top
        first = next((d for d in self.decisions if top is not None and d.lever == top[0]), None)
        if top is None and self.floor.noise > options.noisy:  # the doctor measured none, and the floor is wide:
            first = next((d for d in self.decisions if d.status is Status.NOT_BEYOND_NOISE), None)  # first undecided
        noise, varied = self.floor.noise, None
        if first is not None and first.in_bursts and first.ratios:  # the bursts' own spread left it open
            half, varied = burst_spread(first.ratios, options.min_gain, "in one run")
            noise = max(noise, half)
        busy = too_busy(first, top[1] if top else None, noise, self.run.max_load_pct,
                        self.baseline.wall_s, options.noise_repeats, options.busy_pct, varied=varied)
        if top is not None and first is None and self.stopped:
            busy = top_unmeasured(top[2], top[1], self.baseline.load_pct, self.baseline.wall_s, options.noise_repeats)
        return self.floor.warnings(options.noisy, options.busy_pct, self.baseline.load_pct,
                                   self.run.max_load_pct) + self.warnings + (
            [busy] if busy else [])

    def record(self, lever: Lever, change: Settings, status: Status, reason: str, **measured: Any) -> None:
        """A decision on one candidate of ``lever``, in the words a report needs."""
        decision = Decision(lever.id, change, status, reason, **measured, title=lever.title,
                            subject=lever.subject(change) if lever.subject is not None else lever.title,
                            reduced_precision=lever.parity == REDUCED, amortised=bool(lever.fixed_cost),
                            memory_lever=lever.for_memory)
        self.decisions.append(decision)
        if self.on_decision is not None:
            self.on_decision(decision)

    def busy(self, *results: TrialResult) -> bool:
        """Other processes took more of the machine than during the baseline; warned once."""
        load = max(r.load_pct for r in results)
        if load - self.baseline.load_pct <= self.options.busy_pct:
            return False
        self._busiest = max(self._busiest, load)
        warning = (f"other processes used up to {self._busiest:.0f}% of the machine during some trials (baseline: "
                   f"{self.baseline.load_pct:.0f}%): those trials were measured again, but verdicts may be off")
        said = [i for i, w in enumerate(self.warnings) if w.startswith("other processes used up to ")]
        if said:
            self.warnings[said[0]] = warning  # one warning, with the most load seen
        else:
            self.warnings.append(warning)
        return True

    def keep(self, lever: Lever, best: Screened, pairs: Pairs, candidate_ms: float) -> None:
        """The candidate becomes the incumbent, and the waterfall gains its bar."""
        ratios = pairs.ratios
        self.incumbent = best.settings
        self.incumbent_ms = candidate_ms
        self.incumbent_fixed = statistics.median(pairs.candidate_fixed)
        self.reference = best.result.losses
        self.incumbent_repeats = []
        self.reduced = self.reduced or lever.parity == REDUCED
        self.memory.peak = pairs.peak_memory_bytes
        speedup = self.waterfall[-1].speedup / statistics.median(ratios)
        self.waterfall.append(WaterfallStep(f"+ {lever.title}", self.incumbent, self.baseline.ms_per_step / speedup,
                                            speedup, max(ratios) - min(ratios), self.memory.peak))
        self.on_keep()

    def was_kept(self, lever: Lever, kept: Screened | None) -> bool:
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
