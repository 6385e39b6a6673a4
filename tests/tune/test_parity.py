"""Loss parity on hand-made losses: unreproducible scripts, changes on top of bf16."""

from __future__ import annotations

import random

import pytest

from torchboost.techniques.registry import Lever, Parity
from torchboost.tune.parity import judge, reproducible, run_to_run_spread

EXACT_LEVER = Lever("optimizer", "fused optimizer", Parity.EXACT, lambda incumbent, ctx: [])
REDUCED_LEVER = Lever("precision", "bf16", Parity.REDUCED, lambda incumbent, ctx: [])


def _unseeded_run(seed: int, steps: int = 60) -> list[float]:
    """An unseeded script's losses: the same decay, its own batch-to-batch draws every run."""
    draw = random.Random(seed)
    return [0.9 + 1.5 * 0.93 ** i + draw.gauss(0.0, 0.12) for i in range(steps)]


def test_an_unseeded_scripts_repeats_say_it_is_not_reproducible():
    baseline, repeats = _unseeded_run(0), [_unseeded_run(s) for s in (1, 2, 3)]
    assert not reproducible(baseline, repeats)
    assert reproducible(baseline, [list(baseline), list(baseline)])  # a seeded script's repeats agree
    assert reproducible(baseline, [])  # no repeats: nothing says otherwise
    assert run_to_run_spread(baseline, repeats) > 0.0


@pytest.mark.parametrize("seed", range(4, 12))
def test_an_exact_change_on_an_unseeded_script_is_not_called_incorrect(seed):
    baseline, repeats = _unseeded_run(0), [_unseeded_run(s) for s in (1, 2, 3)]
    candidate = _unseeded_run(seed)  # fused AdamW: the same maths, another run's draws
    verdict = judge(EXACT_LEVER, candidate, baseline, baseline, repeats=repeats)
    assert verdict.ok, verdict.detail
    assert "not reproducible run to run" in verdict.detail


def test_twin_without_its_repeats_the_same_run_is_held_step_by_step_and_fails():
    baseline, candidate = _unseeded_run(0), _unseeded_run(5)
    verdict = judge(EXACT_LEVER, candidate, baseline, baseline)
    assert not verdict.ok and "first 3 losses" in verdict.detail


def test_an_unseeded_scripts_real_divergence_is_still_caught():
    baseline, repeats = _unseeded_run(0), [_unseeded_run(s) for s in (1, 2, 3)]
    diverged = [x + 0.02 * i for i, x in enumerate(_unseeded_run(7))]  # climbs away from the trend
    verdict = judge(EXACT_LEVER, diverged, baseline, baseline, repeats=repeats)
    assert not verdict.ok and "beyond" in verdict.detail


def _bf16_run(offset: float) -> list[float]:
    return [2.0 - 0.05 * i + offset * (1 if i % 2 else -1) for i in range(20)]


def test_an_exact_change_on_top_of_bf16_is_held_to_the_reduced_tolerance():
    baseline = [2.0 - 0.05 * i for i in range(20)]
    bf16 = _bf16_run(0.002)
    compiled = [x * (1 + 2.6e-3) for x in bf16]  # bf16 kernels fused in another order: 2.6e-3 apart
    verdict = judge(EXACT_LEVER, compiled, baseline, bf16, reduced=True)
    assert verdict.ok and verdict.kind == "reduced", verdict.detail


def test_twin_the_same_change_held_to_fp32s_tolerance_is_rejected():
    baseline = [2.0 - 0.05 * i for i in range(20)]
    bf16 = _bf16_run(0.002)
    compiled = [x * (1 + 2.6e-3) for x in bf16]
    verdict = judge(EXACT_LEVER, compiled, baseline, bf16, reduced=False)
    assert not verdict.ok and "limit 1e-03" in verdict.detail


def test_on_top_of_bf16_a_real_divergence_still_fails():
    baseline = [2.0 - 0.05 * i for i in range(20)]
    bf16 = _bf16_run(0.002)
    broken = [x * (1 + 0.01 * i) for i, x in enumerate(bf16)]
    assert not judge(EXACT_LEVER, broken, baseline, bf16, reduced=True).ok
    assert judge(REDUCED_LEVER, bf16, baseline, baseline, reduced=True).ok


def _search_unseeded():
    from torchboost.tune.levers import TuneContext, default_levers
    from torchboost.tune.search import SearchOptions, run_search
    from torchboost.tune.trial_result import TrialResult

    seeds = iter(range(100))

    def unseeded(settings, repeat):  # every run draws its own batches; fused AdamW is 20% faster
        ms = 80.0 if settings.get("optimizer.implementation") == "fused" else 100.0
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms] * 5, losses=_unseeded_run(next(seeds)),
                           samples_per_step=32)

    outcome = run_search(default_levers(), TuneContext(device="cpu", cpu_cores=2, can_compile=False), unseeded,
                         SearchOptions(run_steps=1000))
    return [d for d in outcome.decisions if d.lever == "optimizer"]


def test_the_search_holds_an_unseeded_scripts_exact_change_to_its_own_spread():
    fused = _search_unseeded()
    assert fused and all(d.status != "incorrect" for d in fused), [(d.status, d.reason) for d in fused]


def test_twin_a_search_that_ignores_the_repeats_calls_it_incorrect(monkeypatch):
    monkeypatch.setattr("torchboost.tune.parity.reproducible", lambda baseline, repeats, **kw: True)
    fused = _search_unseeded()
    assert any(d.status == "incorrect" for d in fused), [(d.status, d.reason) for d in fused]
