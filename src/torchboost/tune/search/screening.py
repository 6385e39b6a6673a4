"""Screening: each candidate of a lever measured once, before anything is confirmed.

A candidate runs once on the settings kept before its lever (stopped early once its first
steps are far slower than the configuration kept so far); one that fails, breaks loss
parity or peaks over the memory limit is recorded and dropped, and the rest come back as
:class:`~torchboost.tune.search.pairs.Screened`, for confirmation (:mod:`.confirm`). The
siblings of a lever are screened lowest bound first (``Lever.floor``: the doctor's
measurements), and one whose bound cannot beat the configuration kept so far not at all.
"""

from __future__ import annotations

from torchboost.config import Overlay
from torchboost.tune.search.decision import Status
from torchboost.tune.search.levers import Lever
from torchboost.tune.search.pairs import Screened
from torchboost.tune.search.parity import ParityVerdict
from torchboost.tune.search.search_state import SearchState
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["Screening"]

Settings = Overlay


class Screening:
    """The screening of one search's candidates, on its state (:class:`SearchState`)."""

    def __init__(self, state: SearchState):
        self.state = state

    def ordered(self, lever: Lever, proposals: list[Settings]) -> list[Settings]:
        """The proposals lowest bound first (``Lever.floor``: the doctor's measurements), the
        lever's own order among equals and for those it cannot bound."""
        if lever.floor is None:
            return list(proposals)
        floors = [lever.floor(change, self.state.context) for change in proposals]
        return [change for _, _, change in sorted(
            ((bound[0] if bound is not None else 0.0), i, change) for i, (change, bound) in enumerate(zip(proposals, floors)))]

    def no_room(self, lever: Lever, change: Settings) -> str | None:
        """Why ``change`` is not screened: its bound (``Lever.floor``) cannot beat the
        configuration kept so far beyond the noise floor; None when it can, or is unbounded."""
        state = self.state
        bound = lever.floor(change, state.context) if lever.floor is not None else None
        if bound is None or bound[0] < state.incumbent_ms * state.threshold:
            return None
        kept = "the baseline's" if not state.incumbent else "the configuration kept so far's"
        return (f"not screened: it cannot step in less than {bound[0]:.1f} ms ({bound[1]}), and "
                f"{kept} {state.incumbent_ms:.1f} ms/step needs under {state.incumbent_ms * state.threshold:.1f} ms")

    def screened_out(self, lever: Lever, runners: list[Screened], best: Screened, how: str) -> None:
        """Record the ``runners`` a faster candidate of the lever (``best``) left behind."""
        for other in runners:
            self.state.record(lever, other.change, Status.SCREENED_OUT,
                              f"{other.ms:.1f} ms/step in screening, against {best.ms:.1f} ms for "
                              f"{describe_settings(best.change)} ({how})",
                              ratio=other.ms / self.state.incumbent_ms, ms_per_step=other.ms,
                              peak_memory_bytes=other.result.peak_memory_bytes)

    def screen(self, lever: Lever, proposals: list[Settings]) -> list[Screened]:
        """Each proposal screened once on top of the incumbent (:meth:`screen_one`): the ones
        that ran, kept parity and stayed under the memory limit."""
        state = self.state
        survivors: list[Screened] = []
        for change in proposals:
            if not state.run.budget.affords_trial():
                state.stopped = True
                break
            screened = self.screen_one(lever, state.incumbent, change)
            if screened is not None:
                survivors.append(screened)
        state.screened[lever.id] = [(s.ms, s.change) for s in survivors]
        return survivors

    def screen_one(self, lever: Lever, base: Settings, change: Settings, *, early_stop: bool = True) -> Screened | None:
        """Measure ``change`` once on ``base`` (the settings kept before its lever); record it
        when it fails, breaks parity or peaks over the memory limit (None), else return it. A
        memory lever runs in full: its time cost is not a reason to stop it; so does a
        candidate whose speed bursts already decided (``early_stop`` False)."""
        state = self.state
        slower_than_ms = None if lever.for_memory or not early_stop else state.options.early_stop * state.incumbent_ms
        settings = base | change
        result = state.run(settings, slower_than_ms=slower_than_ms)
        again = result.ok and result.stopped_early and state.busy(result) and state.run.budget.affords_trial()
        if again:
            result = state.run(settings, slower_than_ms=slower_than_ms)
        peak = result.peak_memory_bytes
        if result.ok and result.stopped_early:
            state.record(lever, change, Status.SLOWER, self._stopped_words(result, again),
                         ratio=result.ms_per_step / state.incumbent_ms, ms_per_step=result.ms_per_step,
                         peak_memory_bytes=peak)
            return None
        if not result.ok:
            state.record(lever, change, Status.FAILED, result.error or "the trial failed", peak_memory_bytes=peak)
            return None
        verdict = self._judge(lever, result)
        if not verdict.ok:  # incorrect, or too noisy to tell (an unseeded script's own spread)
            state.record(lever, change, Status(verdict.rejected_as), verdict.detail, ms_per_step=result.ms_per_step,
                         peak_memory_bytes=peak)
            return None
        over = state.memory.over(peak, lever.for_memory)
        if over is not None:
            state.record(lever, change, Status.OVER_MEMORY, over, ratio=result.ms_per_step / state.incumbent_ms,
                         ms_per_step=result.ms_per_step, peak_memory_bytes=peak)
            return None
        return Screened(result.ms_per_step, change, result, settings)

    def _stopped_words(self, result: TrialResult, again: bool) -> str:
        """Why a screening trial was stopped early (``again``: the second time, the first
        having run beside a busy machine), with the load it ran beside when busy."""
        state = self.state
        busy = (f" ({'measured twice; ' if again else ''}other processes used {result.load_pct:.0f}% of the machine)"
                if result.load_pct - state.baseline.load_pct > state.options.busy_pct else "")
        return (f"stopped after {len(result.step_ms)} steps: median {result.median_step_ms:.1f} ms/step, over "
                f"{state.options.early_stop:g}x the {state.incumbent_ms:.1f} ms of the configuration kept so far{busy}")

    def _judge(self, lever: Lever, result: TrialResult) -> ParityVerdict:
        """Loss parity of a screened candidate. The first one may come before any repeat of the
        baseline: when it fails, the incumbent runs once more (a pair's A, ahead of its B) to
        learn whether the script reproduces its own losses, and the candidate is judged again;
        the baseline's, or, where a change was kept before the baseline was repeated, the
        kept configuration's (:meth:`SearchState.own_repeats`)."""
        state = self.state
        verdict = state.parity(lever, result.losses)
        # Before "incorrect": the script's own spread from as many repeats as the A/A would
        # have given (two runs of an unseeded script can end close by chance).
        while not verdict.ok and state.run.budget.affords_trial():
            if len(state.own_repeats()[1]) >= state.options.noise_repeats or (state.incumbent and state.repeats):
                break  # known: the baseline's repeats, once a change is kept, are not added to
            if not state.incumbent_again().ok:
                return verdict
            verdict = state.parity(lever, result.losses)
        return verdict
