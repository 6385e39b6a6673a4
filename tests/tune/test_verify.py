"""The end-to-end check's arithmetic and plan, on numbers made by hand."""

from __future__ import annotations

import pytest

from torchboost.tune.verify import EndToEnd, plan_verification


def test_speedup_is_the_median_pair_ratio():
    e2e = EndToEnd(baseline_runs_s=[10.0, 10.1, 10.0], tuned_runs_s=[8.0, 7.0, 8.0])
    assert e2e.pairs == 3 and e2e.ratios == pytest.approx([0.8, 7.0 / 10.1, 0.8])
    assert e2e.speedup == pytest.approx(1 / 0.8)  # the median pair, not the outlier
    assert e2e.baseline_s == 10.0 and e2e.tuned_s == 8.0
    assert e2e.faster(0.03)
    report = e2e.to_dict()
    assert report["pairs"] == 3 and report["whole_run"] is True and report["steps"] is None
    assert set(report) >= {"baseline_s", "tuned_s", "speedup", "pairs", "steps"}


def test_not_faster_beyond_noise_or_failed_is_not_faster():
    same = EndToEnd(baseline_runs_s=[10.0, 10.0, 10.0], tuned_runs_s=[9.9, 10.1, 9.8])
    assert not same.faster(0.03)  # 1% is inside a 3% margin
    crashed = EndToEnd(baseline_runs_s=[10.0], tuned_runs_s=[5.0], error="the tuned configuration failed")
    assert not crashed.faster(0.03)
    assert not EndToEnd().faster(0.03) and EndToEnd().speedup is None


def test_the_runs_own_noise_is_the_margin():
    """Whole runs 20% apart from one another: a 15% gain is not beyond them; 2% apart, it is."""
    noisy = EndToEnd(baseline_runs_s=[10.0, 12.0, 10.0], tuned_runs_s=[8.5, 10.2, 8.5])
    assert noisy.noise == pytest.approx(0.18, abs=0.03) and not noisy.faster(0.03)
    quiet = EndToEnd(baseline_runs_s=[10.0, 10.2, 10.0], tuned_runs_s=[8.5, 8.6, 8.5])
    assert quiet.noise < 0.03 and quiet.faster(0.03)


def test_the_plan_falls_back_to_as_many_steps_as_fit():
    plan = plan_verification(pairs=3, budget_s=60, step_ms=10.0, fixed_s=2.0, trial_steps=30, warmup=5)
    assert plan.steps is None and plan.run_limit_s == pytest.approx(10.0)
    assert plan.fallback_steps == 800  # (10 s - 2 s) / 10 ms
    tight = plan_verification(pairs=3, budget_s=6, step_ms=10.0, fixed_s=2.0, trial_steps=30, warmup=5)
    assert tight.fallback_steps == 35  # never fewer than a trial's steps


def test_a_whole_run_estimated_too_long_starts_with_the_step_count():
    plan = plan_verification(pairs=3, budget_s=60, step_ms=10.0, fixed_s=2.0, trial_steps=30, warmup=5,
                             whole_run_s=25.0)
    assert plan.steps == 800  # each run stops there: six whole runs of 25 s would not fit in 60 s
    fits = plan_verification(pairs=3, budget_s=60, step_ms=10.0, fixed_s=2.0, trial_steps=30, warmup=5,
                             whole_run_s=8.0)
    assert fits.steps is None


def test_a_memory_lever_kept_to_fit_survives_a_slower_end_to_end_check_and_says_its_cost():
    from types import SimpleNamespace

    from torchboost.config import Overlay
    from torchboost.techniques.cpu import CpuConfig
    from torchboost.tune.tuner import end_to_end_verdict

    settings = Overlay.of(CpuConfig, threads=1)  # any kept setting; what matters is why it was kept
    slower = EndToEnd(baseline_runs_s=[30.0, 31.0, 30.5], tuned_runs_s=[36.0, 37.0, 36.5])
    for_memory = [SimpleNamespace(status="kept", memory_lever=True)]
    kept, why = end_to_end_verdict(settings, for_memory, slower, 0.03)
    assert kept == settings and "under the memory limit" in why and "36.5 s against 30.5 s" in why
    # the twin: the same figures for a change kept for speed are not kept
    for_speed = [SimpleNamespace(status="kept", memory_lever=False)]
    kept, why = end_to_end_verdict(settings, for_speed, slower, 0.03)
    assert kept == Overlay() and why.startswith("not kept")
