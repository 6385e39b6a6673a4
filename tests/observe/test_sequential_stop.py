"""The sequential trial stop on a fake clock and noisy fake steps: decided early when the
ratio is far from 1, run on when it is near."""

from __future__ import annotations

import random

import pytest

from torchboost.observe.record.phases import StopObserving
from torchboost.observe.record.sequential_stop import FASTER, SLOWER, decided
from torchboost.observe.record.step_timing import StepTiming
from torchboost.observe.spec import ObserveSpec

REFERENCE_MS = 1000.0  # the incumbent's second-long steps
MARGIN = 0.05


def _noisy_steps(ratio: float, n: int = 30, spread: float = 0.05, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [REFERENCE_MS * ratio * (1 + rng.gauss(0, spread)) for _ in range(n)]


def _stopped_after(steps: list[float], margin: float = MARGIN) -> tuple[int, str | None]:
    for n in range(1, len(steps) + 1):
        verdict = decided(steps[:n], REFERENCE_MS, margin)
        if verdict is not None:
            return n, verdict
    return len(steps), None


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("ratio, verdict", [(0.66, FASTER), (1.5, SLOWER)])
def test_a_ratio_far_from_one_is_decided_at_the_floor(ratio, verdict, seed):
    n, got = _stopped_after(_noisy_steps(ratio, seed=seed))
    assert got == verdict and n <= 10


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("ratio", [0.99, 1.02, 0.96])
def test_a_ratio_near_one_runs_on(ratio, seed):
    # Near the margin (0.96 against 0.95) the spread cannot tell: the trial runs its length.
    n, got = _stopped_after(_noisy_steps(ratio, seed=seed))
    assert got is None and n == 30


@pytest.mark.parametrize("margin, stops", [(MARGIN, False), (0.0, True)])
def test_the_margin_is_what_a_verdict_must_clear(margin, stops):
    # Twin: with no margin, a steady 2% gain would stop the trial as decided faster.
    steps = _noisy_steps(0.98, spread=0.002)
    assert (_stopped_after(steps, margin)[1] is not None) is stops


@pytest.mark.parametrize("long_step_ms, verdict", [(REFERENCE_MS, FASTER), (9000.0, None)])
def test_one_long_step_among_the_first_is_kept_out_of_the_verdict(long_step_ms, verdict):
    # A recompile of 9 s in the first 8 steps of a candidate at 0.66: the mean is not
    # decided yet, so the trial runs on (twin: the same steps without it stop at 8).
    steps = _noisy_steps(0.66, n=8, spread=0.01)
    steps[2] = long_step_ms
    assert decided(steps, REFERENCE_MS, MARGIN) == verdict


def test_no_verdict_below_the_floor():
    assert decided([660.0] * 7, REFERENCE_MS, MARGIN) is None  # 7 steps
    assert decided([66.0] * 20, 100.0, MARGIN) is None  # 1.3 s of steps
    assert decided([66.0] * 31, 100.0, MARGIN) == FASTER


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("ratio, stopped_at", [(0.6, 8), (1.0, None)])
def test_a_trial_stops_at_its_step_boundary_once_decided(ratio, stopped_at):
    clock = FakeClock()
    spec = ObserveSpec(out_dir=".", steps=30, warmup=0, stop_decided_ms=REFERENCE_MS, stop_decided_margin=MARGIN)
    timing = StepTiming(spec, clock)
    at = None
    for index, ms in enumerate(_noisy_steps(ratio, spread=0.02)):
        clock.now += ms / 1e3
        timing.close_step()
        try:
            timing.stop_if_slow()
        except StopObserving:
            at = index + 1
            break
        timing.next_step(cuda=False)
    assert at == stopped_at
    assert timing.stopped_decided == ("faster" if stopped_at else None)
    assert not timing.stopped_slow
