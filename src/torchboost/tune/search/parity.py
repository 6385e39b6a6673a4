"""Loss parity: a candidate is kept only when its losses agree with the baseline's.

Same seed, same data order, so the comparison is step by step:

- ``exact`` (changes that keep fp32 maths: compile, fused optimizer, threads): the first
  ``first_steps`` losses within ``exact_rtol`` relative. Later steps may drift by
  reassociation, so only the first steps are held to this.
- ``reduced`` (bf16/fp16): the mean of the last ``last_steps`` losses within
  ``reduced_rtol`` relative.
- ``statistical`` (loader settings whose workers draw other random augmentations, or
  whose persistent workers shuffle later epochs in another order, so the batches differ):
  no step-by-step comparison, only the divergence test with ``statistical_rtol``. As the
  last losses then come from other batches, it takes the mean of the last quarter of the
  run (``last_steps`` at least), and also allows three standard errors of the difference
  of the two means, each from its own losses' spread about their straight-line trend: a
  batch's loss varies from batch to batch far more than 10% near convergence.
- Any NaN/inf rejects the candidate, and so does divergence: the mean of the last losses
  above the baseline's by more than the tolerance of the kind (``reduced_rtol``, or
  ``statistical_rtol`` for statistical) times the loss's scale, which is the larger of
  the baseline's last value and the drop from its first steps to its last.

Two things change which check a candidate gets (:func:`judge`):

- *A script that is not reproducible run to run* (no seed: the baseline's own repeats start
  from other losses): no step-by-step comparison can hold, for an exact change or a reduced
  one. The candidate is then judged like a statistical one, on the last quarter of the run,
  with the tolerance widened to ``RUN_TO_RUN_MARGIN`` times how far the baseline's own
  repeats ended apart (in the loss's scale): a change is held to the spread the script has
  before any change. When that spread is itself over the kind's tolerance and the candidate
  departs by more than the margin but within ``TOO_NOISY_MARGIN`` times the spread, the
  losses cannot tell: the verdict is *too noisy to tell* (``too_noisy``; the search's
  ``not_beyond_noise``, never kept, never called incorrect). Beyond that, or a NaN, it is
  incorrect.
- *An exact change on top of reduced precision* (compile after bf16 was kept): bf16 kernels
  fused in another order round differently, so it is held to the reduced tolerance.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from torchboost.techniques.registry import Lever, Parity

__all__ = ["ParityVerdict", "RUN_TO_RUN_MARGIN", "TOO_NOISY_MARGIN", "check_parity", "judge", "reproducible", "run_to_run_spread",
           "EXACT", "REDUCED", "STATISTICAL"]

RUN_TO_RUN_MARGIN = 1.5
"""How many times the baseline's own run-to-run spread an unreproducible script's candidate may
depart from it (the spread of a few repeats understates the next run's)."""
TOO_NOISY_MARGIN = 3.0
"""Up to this many times a spread over the tolerance, a departure is too noisy to tell, not incorrect."""

EXACT = Parity.EXACT
REDUCED = Parity.REDUCED
STATISTICAL = Parity.STATISTICAL


@dataclass(frozen=True)
class ParityVerdict:
    """Whether a candidate's losses match the baseline's, and why not when they don't."""

    ok: bool
    kind: str
    detail: str
    """The numbers behind the verdict, in words."""
    too_noisy: bool = False
    """Not ok, but not shown wrong either: the script's own spread run to run is over the
    tolerance and the candidate is within :data:`TOO_NOISY_MARGIN` times it."""

    @property
    def rejected_as(self) -> str:
        """The search's status for a candidate this verdict does not pass: "not_beyond_noise"
        when too noisy to tell, else "incorrect"."""
        return "not_beyond_noise" if self.too_noisy else "incorrect"


def _mean_last(losses: Sequence[float], n: int) -> float:
    return statistics.fmean(losses[-n:])


def _spread(losses: Sequence[float]) -> float:
    """Variance of ``losses`` about their least-squares straight line (n - 2 degrees of
    freedom): the batch-to-batch noise, the trend left out."""
    steps = list(range(len(losses)))
    slope, intercept = statistics.linear_regression(steps, losses)
    return sum((y - (slope * x + intercept)) ** 2 for x, y in zip(steps, losses)) / (len(losses) - 2)


def _sampling_noise(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Three standard errors of the difference of two means of per-batch losses (0 with
    fewer than three losses on a side)."""
    if len(baseline) < 3 or len(candidate) < 3:
        return 0.0
    return 3.0 * math.sqrt(_spread(baseline) / len(baseline) + _spread(candidate) / len(candidate))


def _exact(baseline: Sequence[float], candidate: Sequence[float], n_first: int, rtol: float) -> ParityVerdict:
    """The first ``n_first`` losses within ``rtol`` relative: fp32 maths, same data."""
    worst = max(abs(c - b) / max(abs(b), 1e-12) for b, c in zip(baseline[:n_first], candidate[:n_first]))
    return ParityVerdict(worst <= rtol, EXACT, f"first {n_first} losses within {worst:.2e} relative (limit {rtol:.0e})")


def check_parity(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    kind: str,
    first_steps: int = 3,
    exact_rtol: float = 1e-3,
    last_steps: int = 5,
    reduced_rtol: float = 0.02,
    statistical_rtol: float = 0.10,
) -> ParityVerdict:
    """Compare per-step losses of a candidate run against the baseline run."""
    if kind not in (EXACT, REDUCED, STATISTICAL):
        raise ValueError(f"kind: expected {EXACT!r}, {REDUCED!r} or {STATISTICAL!r}; got {kind!r}")
    diverge_rtol = statistical_rtol if kind == STATISTICAL else reduced_rtol
    for i, value in enumerate(candidate):
        if not math.isfinite(value):
            return ParityVerdict(False, kind, f"loss is {value} at step {i}")
    steps = min(len(baseline), len(candidate))
    if steps == 0:
        return ParityVerdict(False, kind, "no losses recorded to compare")

    n_last = min(last_steps if kind != STATISTICAL else max(last_steps, steps // 4), steps)
    base_last = _mean_last(baseline[:steps], n_last)
    cand_last = _mean_last(candidate[:steps], n_last)
    last_rel = abs(cand_last - base_last) / max(abs(base_last), 1e-12)
    # Divergence is measured against the loss's scale: its last value, or the drop the
    # baseline made if larger. Near convergence a loss of 0.004 against 0.0037 is 8%
    # "higher" and nothing like divergence; 0.3 against it is.
    scale = max(abs(base_last), statistics.fmean(baseline[:n_last]) - base_last, 1e-12)
    diverged_by = (cand_last - base_last) / scale
    sampling = _sampling_noise(baseline[:steps][-n_last:], candidate[:steps][-n_last:]) if kind == STATISTICAL else 0.0
    if diverged_by > diverge_rtol and cand_last - base_last > sampling:
        return ParityVerdict(
            False, kind,
            f"diverged: mean of the last {n_last} losses {cand_last:.4g} vs baseline {base_last:.4g} "
            f"(higher by {100 * diverged_by:.1f}% of the loss scale {scale:.3g}, limit {100 * diverge_rtol:.0f}%"
            + (f", and by more than three standard errors of batches' losses, {sampling:.3g}" if sampling else "")
            + ")",
        )
    if kind == STATISTICAL:
        return ParityVerdict(
            True, kind,
            f"same data, other random draws: mean of the last {n_last} losses {cand_last:.4g} vs "
            f"baseline {base_last:.4g} ({100 * last_rel:.1f}%, limit {100 * diverge_rtol:.0f}% higher)",
        )

    if kind == EXACT:
        return _exact(baseline, candidate, min(first_steps, steps), exact_rtol)
    ok = last_rel <= reduced_rtol
    return ParityVerdict(
        ok, kind,
        f"mean of the last {n_last} losses {cand_last:.4g} vs baseline {base_last:.4g} "
        f"({100 * last_rel:.2f}%, limit {100 * reduced_rtol:.0f}%)",
    )


def reproducible(baseline: Sequence[float], repeats: Sequence[Sequence[float]], *, first_steps: int = 3,
                 exact_rtol: float = 1e-3) -> bool:
    """Whether the script gives the same losses run to run: each repeat's first ``first_steps``
    losses within ``exact_rtol`` of the baseline's (True without repeats: nothing says otherwise)."""
    for again in repeats:
        n = min(first_steps, len(baseline), len(again))
        if n and any(abs(a - b) > exact_rtol * max(abs(b), 1e-12) for b, a in zip(baseline[:n], again[:n])):
            return False
    return True


def run_to_run_spread(baseline: Sequence[float], repeats: Sequence[Sequence[float]], last_steps: int = 5) -> float:
    """How far the baseline and its repeats end apart: the range of their last-quarter mean
    losses (``last_steps`` at least), over the loss's scale (as :func:`check_parity` takes it)."""
    runs = [list(r) for r in (baseline, *repeats) if len(r)]
    steps = min((len(r) for r in runs), default=0)
    if len(runs) < 2 or steps == 0:
        return 0.0
    n_last = min(max(last_steps, steps // 4), steps)
    means = [_mean_last(r[:steps], n_last) for r in runs]
    base_last = means[0]
    scale = max(abs(base_last), statistics.fmean(baseline[:n_last]) - base_last, 1e-12)
    return (max(means) - min(means)) / scale


def _unreproducible(losses: Sequence[float], reference: Sequence[float], kind: str, spread: float) -> ParityVerdict:
    verdict = check_parity(reference, losses, kind=STATISTICAL, statistical_rtol=_spread_limit(kind, spread))
    noisy = (not verdict.ok and spread > _own_limit(kind)
             and check_parity(reference, losses, kind=STATISTICAL, statistical_rtol=TOO_NOISY_MARGIN * spread).ok)
    word = (f"within {RUN_TO_RUN_MARGIN:g}x that spread" if verdict.ok else
            f"too noisy to tell: beyond {RUN_TO_RUN_MARGIN:g}x that spread, within {TOO_NOISY_MARGIN:g}x, and the "
            f"spread is over the {100 * _own_limit(kind):.0f}% tolerance" if noisy else
            f"beyond {RUN_TO_RUN_MARGIN:g}x that spread")
    return ParityVerdict(verdict.ok, kind,
                         f"the script is not reproducible run to run (its own repeats ended {100 * spread:.1f}% of "
                         f"the loss scale apart): {word}; {verdict.detail}", too_noisy=noisy)


def _own_limit(kind: str) -> float:
    """The divergence tolerance of ``kind`` (:func:`check_parity`'s defaults)."""
    return 0.10 if kind == STATISTICAL else 0.02


def _spread_limit(kind: str, spread: float) -> float:
    """The divergence limit of an unreproducible script: the kind's own, or the margin times
    the spread its repeats showed, whichever is larger."""
    return max(_own_limit(kind), RUN_TO_RUN_MARGIN * spread)


def judge(lever: Lever, losses: list[float], baseline: list[float], reference: list[float], *,
          repeats: Sequence[Sequence[float]] = (), repeated: Sequence[float] | None = None, reduced: bool = False,
          random_ops: Sequence[str] = ()) -> ParityVerdict:
    """Loss parity of a candidate's ``losses``: against the incumbent's (``reference``) with
    the lever's own check, and, once the incumbent differs from the baseline, against the
    baseline's trend (no NaN, no divergence). Not closeness to the baseline: a kept loader
    change may legitimately reorder later epochs (persistent workers draw no new seed), and
    then every later candidate trains on that order, like the incumbent it is held to.

    ``repeats``: the baseline's own repeats (A/A runs), or, with ``repeated``, the repeats of
    that run (the incumbent's, where the baseline was never repeated); when they say the
    script is not reproducible, the candidate is held to their spread instead. ``reduced``: the incumbent
    runs in reduced precision, so an exact lever is held to the reduced tolerance.
    ``random_ops``: the step's ops that draw random numbers; a lever that draws them in code
    of its own (``Lever.draws_own_random``: compile's dropout) is then held to the trend."""
    kind = REDUCED if reduced and lever.parity == EXACT else lever.parity
    trend_limit = 0.10
    repeated = baseline if repeated is None else repeated
    if not reproducible(repeated, repeats):
        spread = run_to_run_spread(repeated, repeats)
        verdict, trend_limit = _unreproducible(losses, reference, kind, spread), _spread_limit(STATISTICAL, spread)
    else:
        verdict = check_parity(reference, losses, kind=kind)
        if not verdict.ok and lever.fallback_parity is not None:
            verdict = check_parity(reference, losses, kind=lever.fallback_parity)
        elif not verdict.ok and lever.draws_own_random and random_ops:
            verdict = _own_draws(check_parity(reference, losses, kind=STATISTICAL), verdict, random_ops)
    if verdict.ok and reference is not baseline:
        trend = check_parity(baseline, losses, kind=STATISTICAL, statistical_rtol=trend_limit)
        if not trend.ok:
            return trend
    return verdict


def _own_draws(trend: ParityVerdict, step_by_step: ParityVerdict, random_ops: Sequence[str]) -> ParityVerdict:
    """The verdict on the trend of a change that draws the step's random numbers itself,
    saying why the losses could not be held step by step."""
    ops = ", ".join(random_ops[:3]) + (", ..." if len(random_ops) > 3 else "")
    why = (f"the step draws random numbers ({ops}) and this change draws them in its own code, so the same seed "
           f"gives other draws; step by step: {step_by_step.detail}")
    return dataclasses.replace(trend, detail=f"{trend.detail} ({why})")
