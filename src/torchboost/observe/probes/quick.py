"""The quick probes: each switchable finding's fix timed on the script itself, a few steps.

After the profiler window (and the replay probe, when it runs), a bounded doctor run times
each fix that is a finding and an in-process switch needing no recompile (bf16 autocast,
bf16/TF32 math in fp32 matmuls, the fused optimizer: each technique's
``Technique.quick_probe``), one after the other: a first step with it on (first calls,
kernel choice: in no figure), then ``QUICK_PAIRS`` pairs of a plain step and a switched
step. Each pair's plain time over its switched time, the median over the pairs, is the
finding's measured ratio (:class:`~torchboost.evidence.observed.QuickProbeFacts`). A pair
is two neighbouring steps, so another process that slows a moment slows both sides of it.

The probe steps are real steps of the script: they train its model, as the replay steps
do; the script is stopped right after them (only a bounded run probes, never ``--full``,
never a tune trial), so its training is never one the user keeps, and what it writes
meanwhile is kept apart like the rest of the doctor's run. Each switch is turned off at
the next step boundary, its state put back exactly (the optimizer's flags, the model's
forward, the backend's setting). A switch whose step raised (caught by the switch) or
made the loss NaN/inf is reported, not fatal; after a non-finite loss no further switch is
probed, since the weights may be NaN by then.

The probes cost at most ``QUICK_SHARE`` of the run before them (so at most a fifth of the
whole), or ``QUICK_MIN_S`` when that is more: a switch whose steps would not fit is not
probed, and says so. Steps of a second or more are probed in two pairs, not three.

A tuning trial on a busy machine uses the same driver for one candidate (its burst trial,
the plan's :attr:`~torchboost.plan.Plan.bursts`, handed over with its settings): the switch
that makes exactly the candidate's change
(:func:`switch_for`), alternated in bursts of a few steps, plain then switched, for as many
pairs as the trial asks; the pairs' ratios are the candidate's against the incumbent, each
measured within seconds, under the same load.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from torchboost.config import Overlay

from torchboost.evidence.observed import Facts, QuickProbeFacts
from torchboost.techniques.registry import ProbeContext, QuickSwitch, techniques

__all__ = ["QuickProbes", "max_quick_steps", "choose_switches", "switch_for", "QUICK_PAIRS", "QUICK_SHARE",
           "quick_budget_ms", "quick_pairs"]

QUICK_PAIRS = 3
"""Pairs of a plain and a switched step per probe (after its one unmeasured switched step)."""
QUICK_SHARE = 0.25
QUICK_MIN_S = 20.0
"""...but never less than this many seconds: after a short, adaptive observation of
seconds-long steps a quarter of it fits no probe (nanoGPT's shape at 2.9 s a step)."""
SLOW_PROBE_MS = 1000.0
SLOW_PROBE_PAIRS = 2
"""Steps of a second or more are probed in this many pairs: each pair is seconds of the run."""
"""The probes' time, as a share of the observed run's time before them: 0.25 keeps them at
most a fifth of the whole run."""

_WARM, _PLAIN, _SWITCHED = "warm", "plain", "switched"


def quick_budget_ms(elapsed_s: float) -> float:
    """What the probes may spend after ``elapsed_s`` of run: :data:`QUICK_SHARE` of it, at
    least :data:`QUICK_MIN_S`."""
    return max(QUICK_SHARE * elapsed_s, QUICK_MIN_S) * 1000.0


def quick_pairs(step_ms: float) -> int:
    """Pairs per probe for steps of ``step_ms``: :data:`SLOW_PROBE_PAIRS` from a second on."""
    return SLOW_PROBE_PAIRS if step_ms >= SLOW_PROBE_MS else QUICK_PAIRS


def max_quick_steps() -> int:
    """The most steps the quick probes take: a first step and the pairs, for each technique
    with a switch."""
    return sum(1 for t in techniques() if t.quick_probe is not None) * (1 + 2 * QUICK_PAIRS)


def choose_switches(facts: Facts, ctx: ProbeContext) -> tuple[list[QuickSwitch], list[str]]:
    """Each technique's quick switch whose finding fires on ``facts``, the largest estimate
    first (when the budget runs out, what is left unprobed is what was expected to matter
    least), and what failed while choosing, in words."""
    chosen, errors = [], []
    for technique in techniques():
        if technique.quick_probe is None:
            continue
        try:
            switch = technique.quick_probe(ctx)
            rule = next((r for r in technique.rules if switch and r.id == switch.finding_id), None)
            finding = rule.check(facts) if switch is not None and rule is not None else None
            if finding is not None:
                chosen.append((finding.expected_speedup, switch))
        except Exception as exc:  # noqa: BLE001 - the observer never breaks the user's run
            errors.append(f"quick probe of {technique.name}: {type(exc).__name__}: {exc}")
    return [switch for _, switch in sorted(chosen, key=lambda c: -c[0])], errors


def switch_for(change: Mapping[str, Any], ctx: ProbeContext) -> tuple[QuickSwitch | None, str]:
    """The switch that makes exactly ``change`` (a burst trial's, from its plan) in the live
    process, or None and why none does (no technique has such a switch, or it cannot apply
    here: the script's own autocast, a compiled model)."""
    wanted = Overlay(change)
    for technique in techniques():
        if technique.quick_probe is None:
            continue
        switch = technique.quick_probe(ctx)
        if switch is not None and Overlay(switch.setting) == wanted:
            return switch, ""
    words = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or "no change"
    return None, f"no switch makes {words} in the running script (none exists, or it cannot apply here)"


def _finite(loss: Any) -> bool:
    return not isinstance(loss, torch.Tensor) or bool(torch.isfinite(loss).all())  # syncs: probe steps only


class QuickProbes:
    """Drives the switches between step boundaries and keeps what each measured (:attr:`results`)."""

    def __init__(self) -> None:
        self.active = False
        """A probe step is in flight (or about to start)."""
        self.results: list[QuickProbeFacts] = []
        """One per switch chosen, in the order probed."""
        self._queue: list[QuickSwitch] = []
        self._switch: QuickSwitch | None = None
        self._plan: list[str] = []
        self._on = False
        self._budget_ms = self._spent_ms = self._step_ms = 0.0
        self._plain_finite = True
        self._pairs, self._burst = QUICK_PAIRS, 1
        self._decided: Callable[[list[float]], bool] | None = None

    def start(self, switches: list[QuickSwitch], *, budget_ms: float, step_ms: float, loss: Any = None,
              pairs: int = QUICK_PAIRS, burst: int = 1,
              decided: Callable[[list[float]], bool] | None = None) -> bool:
        """Begin with ``switches`` within ``budget_ms`` (a plain step takes about ``step_ms``;
        ``loss``: the last plain step's), each for ``pairs`` pairs of ``burst`` plain steps then
        ``burst`` switched ones, fewer once ``decided`` says so of the ratios so far (switched
        over plain step, one per step of the completed pairs); False when none can run (their
        results say why)."""
        self._queue, self._budget_ms, self._step_ms = list(switches), budget_ms, step_ms
        self._pairs, self._burst, self._decided = max(1, pairs), max(1, burst), decided
        self._plain_finite = _finite(loss)
        self.active = self._next()
        return self.active

    def after_step(self, step_ms: float, loss: Any) -> bool:
        """The probe step in flight closed after ``step_ms`` with ``loss``; set up the next one.
        False when the probes are over (every switch off again)."""
        self._spent_ms += step_ms
        kind, result = self._plan.pop(0), self.results[-1]
        if kind == _WARM:
            result.warmup_ms = step_ms
        else:
            (result.plain_ms if kind == _PLAIN else result.switched_ms).append(step_ms)
        result.error = result.error or self._problem(kind, loss)
        if result.error or (self._spent_ms > self._budget_ms and self._plan):
            if not result.error and not result.switched_ms:
                result.error = "was cut short: the probes' share of the run was spent"
            self._plan.clear()
        elif kind == _SWITCHED and self._plan and self._pair_decided(result):
            self._plan.clear()
        if self._plan:
            self._set(self._plan[0] != _PLAIN)
            return True
        self._set(False)
        self.active = self._next()
        return self.active

    def _pair_decided(self, result: QuickProbeFacts) -> bool:
        """A pair of bursts just completed and ``decided`` says its ratios so far settle it."""
        done = len(result.switched_ms)
        if self._decided is None or done != len(result.plain_ms) or done % self._burst:
            return False
        return self._decided([s / p for p, s in zip(result.plain_ms, result.switched_ms) if p > 0])

    def close(self) -> None:
        """Turn the switch in flight off (the script ended during a probe step)."""
        self._set(False)
        self._queue.clear()
        self.active = False

    def _problem(self, kind: str, loss: Any) -> str | None:
        switch = self._switch
        if switch is not None and switch.errors:
            return f"raised with it on: {switch.errors[0]}"
        finite = _finite(loss)
        if kind == _PLAIN:
            self._plain_finite = finite
        elif not finite and self._plain_finite:
            self._queue.clear()  # the weights may be NaN now: no other switch is timed on them
            return "made the loss NaN or inf"
        return None

    def _next(self) -> bool:
        """Start the next switch that fits the budget; False when none is left."""
        steps = 1 + 2 * self._pairs * self._burst
        while self._queue:
            switch = self._queue.pop(0)
            result = QuickProbeFacts(finding_id=switch.finding_id, label=switch.label)
            self.results.append(result)
            if self._spent_ms + steps * self._step_ms > self._budget_ms:
                result.error = "was not run: the probes' share of the run was spent"
                continue
            self._switch = switch
            self._plan = [_WARM] + ([_PLAIN] * self._burst + [_SWITCHED] * self._burst) * self._pairs
            self._set(True)
            if result.error is None:
                return True
        return False

    def _set(self, on: bool) -> None:
        """Turn the current switch on or off; a failure ends its probe (its off is still tried)."""
        switch = self._switch
        if switch is None or on == self._on:
            return
        try:
            (switch.on if on else switch.off)()
            self._on = on
        except Exception as exc:  # noqa: BLE001 - the observer never breaks the user's run
            self.results[-1].error = f"could not be switched {'on' if on else 'off'}: {type(exc).__name__}: {exc}"
            self._plan.clear()
            if on:
                self._on = True
                self._set(False)
            else:
                self._on = False
