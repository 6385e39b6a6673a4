"""The noise floor from the pairs' A's: the top candidate is measured from the start."""

from __future__ import annotations

import dataclasses

import pytest

from slow_script import SlowScript
from test_search import CPU2, FakeScript

from torchboost.config import Overlay
from torchboost.evidence.findings import Measured
from torchboost.techniques.precision import PrecisionTuning
from torchboost.tune.search.levers import default_levers, order_levers
from torchboost.tune.search.noise import NoiseFloor
from torchboost.tune.search.parity import judge
from torchboost.tune.search import SearchOptions, run_search
from torchboost.tune.trials.trial_result import TrialResult

BF16 = {"precision.lower": Measured(1.5, 6, "bf16 autocast")}


def _search(aa_first: bool, budget_s: float = 450.0):
    # 4 s steps, 30 measured and 5 warm-up, 10 s start-up: 150 s a trial. The baseline's
    # three A/A runs alone, after it, are 600 s.
    script = SlowScript(factors={("precision.mode", "bf16"): 0.66})
    context = dataclasses.replace(CPU2, measured=BF16)
    levers = order_levers(default_levers(), {}, BF16)
    outcome = run_search(levers, context, script, SearchOptions(budget_s=budget_s, aa_first=aa_first),
                         clock=script.clock)
    return script, outcome


@pytest.mark.parametrize("aa_first", [False, True])
def test_the_top_candidate_is_measured_within_the_first_third_of_the_budget(aa_first):
    script, outcome = _search(aa_first)
    started = script.first_call("precision.mode")
    if aa_first:  # twin: the A/A first spends the budget before bf16 is measured at all
        assert started is None and outcome.stopped_by_budget
        assert "precision.mode" not in outcome.settings
    else:
        assert started is not None and started <= 450.0 / 3
        assert outcome.settings.get("precision.mode") == "bf16"


def test_the_floor_comes_from_the_pairs_as_and_is_as_wide_as_before():
    # The same 1% noise as an A/A first measures; the floor now from the A's of the pairs.
    paired = run_search(default_levers(), CPU2, FakeScript(noise=0.01), SearchOptions(run_steps=1000))
    first = run_search(default_levers(), CPU2, FakeScript(noise=0.01), SearchOptions(run_steps=1000, aa_first=True))
    assert len(paired.aa_ratios) >= 3
    assert paired.noise == pytest.approx(first.noise, abs=0.011)
    assert paired.settings == first.settings


def _run(ms, fixed_s=1.0):
    return TrialResult(settings={}, step_ms=[ms] * 5, losses=[1.0], fixed_s=fixed_s)


def test_a_new_incumbent_starts_a_new_series_of_ratios():
    floor = NoiseFloor(min_gain=0.03)
    floor.add(Overlay(), _run(100.0))
    floor.add(Overlay(), _run(110.0, fixed_s=1.5))
    floor.add(Overlay({"cpu.threads": 1}), _run(50.0))  # not a repeat of the 110 ms run
    floor.add(Overlay({"cpu.threads": 1}), _run(50.0))
    assert floor.aa_ratios == pytest.approx([1.1, 1.0])
    assert floor.noise == pytest.approx(0.05) and floor.threshold == pytest.approx(0.95)
    assert floor.fixed_noise_s == pytest.approx(0.5)


def test_the_first_candidate_on_a_script_that_does_not_reproduce_itself_is_judged_on_its_spread():
    # Each run of the script draws other augmentations: its own losses differ by ~3% run to
    # run. The first candidate comes before any repeat: the baseline runs once more first.
    class Unreproducible(FakeScript):
        def __call__(self, settings, repeat, **_):
            result = super().__call__(settings, repeat)
            draw = len(self.calls) % 3 - 1  # 0, +1, -1, 0, ...: no two runs in a row draw alike
            result.losses = [x * (1 + draw * 0.03 * (i % 2)) for i, x in enumerate(result.losses)]
            return result

    script = Unreproducible(factors={("optimizer.implementation", "fused"): 0.8})
    context = dataclasses.replace(CPU2, has_loader=False)
    optimizer = [lv for lv in default_levers() if lv.id == "optimizer"]
    outcome = run_search(optimizer, context, script, SearchOptions())
    fused = next(d for d in outcome.decisions if d.lever == "optimizer" and d.status != "screened_out")
    assert fused.status == "kept", fused.reason
    # Twin: judged with no repeat of the baseline, the same losses fail exact parity.
    lever = next(lv for lv in default_levers() if lv.id == "optimizer")
    baseline = script(Overlay(), 0).losses
    candidate = script(Overlay({"optimizer.implementation": "fused"}), 0).losses
    assert not judge(lever, candidate, baseline, baseline).ok


@pytest.mark.parametrize("swing, status", [(3.0, "not_beyond_noise"), (1.02, "kept")])
def test_runs_that_vary_by_over_100_percent_call_no_faster_candidate_slower(swing, status):
    """Runs alike that differ 3x (another tune beside this one) put the floor over 100%: no
    candidate is faster beyond it, and one measured faster (0.8) is not called slower, as
    it was when the threshold went below 0. Twin: a quiet machine keeps it."""
    loads = iter([1.0, swing] * 50)  # the baseline's runs, one after the other
    clock = [0.0]

    def busy(settings, repeat, **_):
        ms = 80.0 if settings.get("precision.mode") == "bf16" else 100.0 * next(loads)
        clock[0] += 10.0
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms] * 30, losses=[1.0] * 30,
                           samples_per_step=16)

    levers = [lv for lv in order_levers(default_levers(), {}, BF16) if lv.id == "precision"]
    outcome = run_search(levers, dataclasses.replace(CPU2, measured=BF16).with_own(PrecisionTuning(cpu_bf16=True)), busy,
                         SearchOptions(budget_s=2000), clock=lambda: clock[0])
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    assert decision.status == status, decision.reason
    assert NoiseFloor(min_gain=0.03, aa_ratios=[3.0, 0.33, 3.0]).threshold == 0.0
