"""The search on fake measurements: coupled knobs, parity, compile amortisation, budget."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from torchboost.techniques.compile import CompileTuning
from torchboost.techniques.loader import LoaderTuning
from torchboost.techniques.memory import MemoryTuning
from torchboost.techniques.precision import PrecisionTuning
from torchboost.tune.search.levers import TuneContext, default_levers, order_levers
from torchboost.tune.search.parity import EXACT, REDUCED, check_parity
from torchboost.tune.search import SearchOptions, compile_break_even, run_search
from torchboost.tune.trials.trial_result import TrialResult

CPU2 = TuneContext(device="cpu", cpu_cores=2, tuning=(PrecisionTuning(cpu_bf16=False), CompileTuning(can_compile=True)))
BASE_LOSSES = [2.0 - 0.05 * i for i in range(20)]

# The 2-core loader-bound script from the issue: ms per step by (workers, threads).
HOST_MS = {(0, 2): 84.0, (2, 2): 88.0, (1, 2): 127.0, (2, 1): 62.0, (1, 1): 95.0}


class FakeScript:
    """Step time = host time x per-lever factors; a little deterministic noise per repeat."""

    def __init__(self, factors=None, losses=None, compile_s=0.0, noise=0.01, warm_compile_s=None):
        self.factors = factors or {}
        self.losses = losses or {}
        self.compile_s = compile_s
        self.warm_compile_s = compile_s if warm_compile_s is None else warm_compile_s  # once the cache is filled
        self.compiled = False
        self.noise = itertools.cycle([1.0, 1.0 + noise, 1.0 - noise])
        self.calls = []

    def __call__(self, settings, repeat, **_):
        self.calls.append((dict(settings), repeat))
        host = (settings.get("loader.num_workers", 0), settings.get("cpu.threads", 2))
        ms = HOST_MS.get(host, 100.0)
        losses = list(BASE_LOSSES)
        for key, value in settings.items():
            ms *= self.factors.get((key, value), 1.0)
            if (key, value) in self.losses:
                losses = self.losses[(key, value)]
        ms *= next(self.noise)
        compile_s = 0.0
        if settings.get("compile.mode", "off") != "off":
            compile_s, self.compiled = (self.warm_compile_s if self.compiled else self.compile_s), True
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms] * 5, losses=losses,
                           samples_per_step=32, compile_s=compile_s)


def test_coupled_workers_and_threads_are_found():
    script = FakeScript()
    outcome = run_search(default_levers(), CPU2, script, SearchOptions(run_steps=1000))
    assert outcome.settings["loader.num_workers"] == 2
    assert outcome.settings["cpu.threads"] == 1
    assert outcome.speedup == pytest.approx(84 / 62, rel=0.03)
    # A one-knob-at-a-time tuner from the default (threads fixed at 2) would stay at baseline:
    one_knob = {w: HOST_MS[(w, 2)] for w in (0, 1, 2)}
    assert min(one_knob, key=one_knob.get) == 0


def test_slower_lever_is_reverted_with_reason():
    script = FakeScript(factors={("precision.mode", "bf16"): 1.8})
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    assert "precision.mode" not in outcome.settings
    bf16 = [d for d in outcome.decisions if d.lever == "precision"]
    assert bf16 and bf16[0].status == "slower" and "median ratio" in bf16[0].reason
    assert bf16[0].ratio == pytest.approx(1.8, rel=0.05)


def test_diverging_candidate_is_rejected_as_incorrect():
    nan_losses = BASE_LOSSES[:3] + [math.inf] + [math.nan] * 16
    script = FakeScript(factors={("precision.mode", "bf16"): 0.5}, losses={("precision.mode", "bf16"): nan_losses})
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    assert decision.status == "incorrect"
    assert "step 3" in decision.reason
    assert "precision.mode" not in outcome.settings  # twice as fast, but wrong: never chosen


def test_faster_correct_reduced_precision_is_kept():
    close = [x * 1.005 for x in BASE_LOSSES]
    script = FakeScript(factors={("precision.mode", "bf16"): 0.6}, losses={("precision.mode", "bf16"): close})
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    assert outcome.settings["precision.mode"] == "bf16"


def test_compile_kept_only_when_it_pays_for_itself():
    script = FakeScript(factors={("compile.mode", "default"): 0.9}, compile_s=30.0)
    short = run_search(default_levers(), CPU2, script, SearchOptions(run_steps=500))
    decision = next(d for d in short.decisions if d.lever == "compile")
    assert decision.status == "not_repaid"
    assert "pays off after" in decision.reason
    # 62 ms * 10% = 6.2 ms saved per step -> 30 s / 6.2 ms ~ 4800 steps.
    assert decision.break_even_steps == pytest.approx(30_000 / 6.2, rel=0.15)  # 1% noise on both
    long = run_search(default_levers(), CPU2, FakeScript(factors={("compile.mode", "default"): 0.9}, compile_s=30.0),
                      SearchOptions(run_steps=100_000))
    assert long.settings.get("compile.mode") == "default"


@pytest.mark.parametrize("warm_s, kept", [(3.0, True), (30.0, False)])
def test_compile_is_judged_on_the_warm_cost_every_later_run_pays(warm_s, kept):
    # Cold 30 s on the first compiled run; 6.2 ms saved per step. Warm 3 s pays off after
    # ~480 steps of a 1000-step run; the twin whose cache never warms needs ~4800.
    script = FakeScript(factors={("compile.mode", "default"): 0.9}, compile_s=30.0, warm_compile_s=warm_s)
    outcome = run_search(default_levers(), CPU2, script, SearchOptions(run_steps=1000))
    decision = next(d for d in outcome.decisions if d.lever == "compile" and d.status != "screened_out")
    assert (outcome.settings.get("compile.mode") == "default") is kept, decision.reason
    assert decision.break_even_steps == pytest.approx(1000 * warm_s / 6.2, rel=0.15)
    if kept:
        assert "compile 30.0 s on the first run, 3.0 s on every later one" in decision.reason


@pytest.mark.parametrize("run_steps, kept", [(None, False), (100_000, True)])
def test_a_compile_is_not_kept_on_an_unknown_run_length(run_steps, kept):
    script = FakeScript(factors={("compile.mode", "default"): 0.9}, compile_s=30.0)
    outcome = run_search(default_levers(), CPU2, script, SearchOptions(run_steps=run_steps))
    decision = next(d for d in outcome.decisions if d.lever == "compile" and d.status != "screened_out")
    assert (outcome.settings.get("compile.mode") == "default") is kept, decision.reason
    if not kept:
        assert decision.status == "not_repaid" and "pass --run-steps" in decision.reason


def test_budget_stops_with_best_so_far():
    ticks = itertools.count()
    outcome = run_search(default_levers(), CPU2, FakeScript(), SearchOptions(budget_s=3), clock=lambda: next(ticks))
    assert outcome.stopped_by_budget
    assert outcome.trials_run <= 4


def test_failed_baseline_is_reported():
    def crash(settings, repeat, **_):
        return TrialResult(settings=settings, repeat=repeat, ok=False, error="exit code 1")

    outcome = run_search(default_levers(), CPU2, crash)
    assert outcome.error and "exit code 1" in outcome.error
    assert outcome.settings == {}


def test_same_measurements_same_choice():
    first = run_search(default_levers(), CPU2, FakeScript(), SearchOptions())
    second = run_search(default_levers(), CPU2, FakeScript(), SearchOptions())
    assert first.settings == second.settings
    assert [d.status for d in first.decisions] == [d.status for d in second.decisions]


def test_order_follows_expected_gain_in_process_switches_first():
    """Among the levers that cost a run per candidate, the largest expected gain first
    (compile's x1.4 before the sharing strategy's x1.1); every in-process switch before them,
    by its own gain (bf16's x1.2, then the host's). Twin: without the grouping, compile led."""
    levers = order_levers(default_levers(), {"compile.enable": 1.4, "data.workers": 1.1, "precision.lower": 1.2})
    ids = [lv.id for lv in levers]
    assert ids[:2] == ["precision", "host"] and all(lv.in_process for lv in levers[:ids.index("compile")])
    assert ids.index("compile") < ids.index("sharing") and not levers[ids.index("compile")].in_process


def test_break_even():
    assert compile_break_even(10.0, 20.0, 10.0) == pytest.approx(1000)
    assert compile_break_even(10.0, 10.0, 12.0) == math.inf


@pytest.mark.parametrize(
    "candidate,kind,ok",
    [
        ([2.0, 1.9, 1.8, 1.7, 1.6, 1.5], EXACT, True),
        ([2.0005, 1.9, 1.8, 1.7, 1.6, 1.5], EXACT, True),
        ([2.01, 1.9, 1.8, 1.7, 1.6, 1.5], EXACT, False),  # 0.5% off at step 0: not fp32-equal
        ([2.05, 1.95, 1.83, 1.72, 1.61, 1.52], REDUCED, True),
        ([2.0, 1.9, 1.8, 1.9, 2.0, 2.1], REDUCED, False),  # diverges
        ([2.0, 1.9, float("nan"), 1.7, 1.6, 1.5], REDUCED, False),
    ],
)
def test_parity(candidate, kind, ok):
    assert check_parity([2.0, 1.9, 1.8, 1.7, 1.6, 1.5], candidate, kind=kind).ok is ok


def test_compile_that_cannot_pay_off_is_not_even_tried():
    script = FakeScript(factors={("compile.mode", "default"): 0.5}, compile_s=30.0)
    outcome = run_search(default_levers(), CPU2, script, SearchOptions(run_steps=20))
    decision = next(d for d in outcome.decisions if d.lever == "compile")
    assert decision.status == "skipped" and "cannot pay off" in decision.reason
    assert not any(s.get("compile.mode") for s, _ in script.calls)


def test_loader_change_with_other_random_draws_is_judged_on_statistics():
    # Workers draw other augmentations: step losses differ by ~3%, the trend does not.
    other_draws = [x * (1.03 if i % 2 else 0.97) for i, x in enumerate(BASE_LOSSES)]
    script = FakeScript(losses={("loader.num_workers", 2): other_draws})
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    assert outcome.settings["loader.num_workers"] == 2


def test_loader_change_that_diverges_is_still_rejected():
    diverged = [x * (1 + 0.05 * i) for i, x in enumerate(BASE_LOSSES)]
    script = FakeScript(losses={("loader.num_workers", 2): diverged, ("loader.num_workers", 1): diverged})
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    assert "loader.num_workers" not in outcome.settings
    assert any(d.status == "incorrect" and "diverged" in d.reason for d in outcome.decisions)


@pytest.mark.parametrize(
    "candidate,ok",
    [([2.06, 1.84, 1.85, 1.65, 1.64, 1.46], True), ([2.0, 1.9, 1.9, 1.9, 1.9, 1.9], False)],
)
def test_statistical_parity(candidate, ok):
    from torchboost.tune.search.parity import STATISTICAL

    assert check_parity([2.0, 1.9, 1.8, 1.7, 1.6, 1.5], candidate, kind=STATISTICAL).ok is ok


def test_non_finite_baseline_loss_stops_the_search():
    def nan_baseline(settings, repeat, **_):
        return TrialResult(settings=settings, repeat=repeat, step_ms=[10.0] * 3, losses=[1.0, math.nan])

    outcome = run_search(default_levers(), CPU2, nan_baseline)
    assert outcome.error and "nan at step 1" in outcome.error


def test_after_bf16_is_kept_fp32_levers_are_judged_against_the_bf16_run():
    bf16 = [x * 1.004 for x in BASE_LOSSES]  # 0.4% off fp32 from step 0: a bf16 run's rounding
    losses = {("precision.mode", "bf16"): bf16, ("optimizer.implementation", "fused"): bf16}
    script = FakeScript(factors={("precision.mode", "bf16"): 0.6, ("optimizer.implementation", "fused"): 0.8},
                        losses=losses)
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    assert outcome.settings["precision.mode"] == "bf16"
    assert outcome.settings["optimizer.implementation"] == "fused"


def test_a_candidate_that_crashes_when_measured_again_is_not_kept():
    class CrashOnRepeat(FakeScript):
        def __call__(self, settings, repeat, **_):
            result = super().__call__(settings, repeat)
            if settings.get("optimizer.implementation") == "fused" and repeat > 0:
                result.ok, result.error = False, "exit code 1"
            return result

    script = CrashOnRepeat(factors={("optimizer.implementation", "fused"): 0.5})
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    assert "optimizer.implementation" not in outcome.settings or outcome.settings["optimizer.implementation"] != "fused"
    fused = [d for d in outcome.decisions if d.settings.get("optimizer.implementation") == "fused"]
    assert fused and fused[-1].status == "failed" and "measured again" in fused[-1].reason


def test_nothing_is_kept_on_the_screening_ratio_alone():
    ticks = itertools.count()
    # The clock runs out right after the screening trials: no pair can confirm.
    outcome = run_search(default_levers(), CPU2, FakeScript(), SearchOptions(budget_s=6), clock=lambda: next(ticks))
    assert all(d.status != "kept" or len(d.ratios) >= 2 for d in outcome.decisions)


def test_levers_after_a_reordering_loader_change_are_held_to_the_new_order():
    # Persistent workers reorder epochs after the first: the loss path moves (here 5% lower
    # by the end) for the kept loader setting and every candidate built on it.
    reordered = [x * (1.0 - 0.005 * i) for i, x in enumerate(BASE_LOSSES)]
    losses = {("loader.num_workers", 2): reordered}
    script = FakeScript(factors={("optimizer.implementation", "fused"): 0.8}, losses=losses)
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    assert outcome.settings["loader.num_workers"] == 2
    assert outcome.settings["optimizer.implementation"] == "fused"


def _two_lever_script(calls):
    # One worker is loader-bound at about 11.5 ms whatever the model does (channels_last
    # gains 2% there: too little to keep); a second worker only pays once channels_last
    # has freed the training process's core (2 cores, 3 processes).
    def measure(settings, repeat, **_):
        calls.append(dict(settings))
        workers = settings.get("loader.num_workers", 0)
        cl = settings.get("memory.channels_last", False)
        threads = settings.get("cpu.threads", 2)
        ms = {0: 17.0, 1: 11.3 if cl else 11.5, 2: 10.0 if cl else 11.9}[workers] if threads == 1 else 18.0
        if workers == 0 and cl:
            ms = 16.9  # alone, too small a gain to keep
        ms *= (1.0, 1.004, 0.996)[repeat % 3]
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms] * 5, losses=list(BASE_LOSSES),
                           samples_per_step=32)
    return measure


BOOSTER_CPU2 = TuneContext(device="cpu", cpu_cores=2, uses_booster=True,
                           tuning=(MemoryTuning(has_conv2d=True), LoaderTuning(file_system_sharing=False),
                                   CompileTuning(can_compile=False)))


def test_interaction_pass_finds_two_levers_that_only_pay_together():
    calls = []
    outcome = run_search(default_levers(), BOOSTER_CPU2, _two_lever_script(calls), SearchOptions())
    assert outcome.settings["loader.num_workers"] == 2 and outcome.settings["memory.channels_last"] is True
    kept = [d for d in outcome.decisions if d.status == "kept"]
    assert [d.lever for d in kept] == ["host", "interaction"]
    assert kept[-1].settings == {"loader.num_workers": 2, "loader.persistent_workers": True, "cpu.threads": 1,
                                 "memory.channels_last": True}
    assert outcome.speedup == pytest.approx(18.0 / 10.0, rel=0.02)  # baseline: 2 threads, no workers
    # Only levers that gained a little alone are combined: the optimizer kernels (no gain) are not.
    assert all("optimizer.implementation" not in d.settings for d in outcome.decisions if d.lever == "interaction")


def test_without_the_interaction_pass_one_lever_at_a_time_stays_at_one_worker():
    # The twin: a margin of 0 admits no runner-up, and the search ends where the
    # one-lever-at-a-time pass left it.
    calls = []
    outcome = run_search(default_levers(), BOOSTER_CPU2, _two_lever_script(calls), SearchOptions(interaction_margin=0.0))
    assert outcome.settings["loader.num_workers"] == 1 and "memory.channels_last" not in outcome.settings
    assert not any(d.lever == "interaction" for d in outcome.decisions)


def test_auto_trial_steps_aim_at_a_measured_window_within_bounds():
    from torchboost.tune.trials.trial_length import MAX_TRIAL_STEPS, MIN_TRIAL_STEPS, TRIAL_WINDOW_S, auto_trial_steps

    assert auto_trial_steps(2.0) == math.ceil(TRIAL_WINDOW_S * 1e3 / 2.0)  # 2 ms steps: 750 of them
    assert auto_trial_steps(0.01) == MAX_TRIAL_STEPS
    assert auto_trial_steps(500.0) == MIN_TRIAL_STEPS  # slow steps: never fewer than the floor
    assert auto_trial_steps(None) == MIN_TRIAL_STEPS
    assert auto_trial_steps(1.0, planned_steps=400, warmup=5) == 395  # no more than the script runs
    assert auto_trial_steps(1.0, planned_steps=10, warmup=5) == MIN_TRIAL_STEPS


def test_slow_steps_that_wait_for_no_data_take_fewer_steps_a_trial():
    """1.5 s steps, compute-bound: 12 steps (18 s), not 30 (45 s). Twins: the same steps with
    a loader that waits (a queue that drains), and 100 ms steps, keep 30."""
    from torchboost.tune.trials.trial_length import MIN_SLOW_TRIAL_STEPS, MIN_TRIAL_STEPS, auto_trial_steps

    assert auto_trial_steps(1500.0, data_wait_pct=0.5) == MIN_SLOW_TRIAL_STEPS == 12
    assert auto_trial_steps(5500.0, data_wait_pct=0.5) == 8  # 44 s of steps beside a busy loop, not 66
    assert auto_trial_steps(5500.0, data_wait_pct=20.0) == MIN_TRIAL_STEPS  # a loader's queue to drain
    assert auto_trial_steps(1500.0, data_wait_pct=20.0) == MIN_TRIAL_STEPS
    assert auto_trial_steps(1500.0) == MIN_TRIAL_STEPS  # the data wait unknown: the loader's floor
    assert auto_trial_steps(100.0, data_wait_pct=0.0) == MIN_TRIAL_STEPS
    assert auto_trial_steps(1500.0, planned_steps=10, warmup=5, data_wait_pct=0.0) == MIN_SLOW_TRIAL_STEPS


def test_steps_per_trial_option_takes_auto_or_a_number():
    import argparse

    from torchboost.cli.tune import add_arguments, options_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert options_from_args(parser.parse_args([]), config="t.toml").steps_per_trial is None
    assert options_from_args(parser.parse_args(["--steps-per-trial", "auto"]), config="t.toml").steps_per_trial is None
    assert options_from_args(parser.parse_args(["--steps-per-trial", "50"]), config="t.toml").steps_per_trial == 50
    with pytest.raises(SystemExit):
        parser.parse_args(["--steps-per-trial", "many"])


CONVERGING = [2.0 * 0.85**i for i in range(40)]  # 2.0 down to about 0.004


@pytest.mark.parametrize(
    "tail,kind,ok",
    [
        (1.12, EXACT, True),  # 12% above a loss of 0.004: noise near convergence, not divergence
        (80.0, EXACT, False),  # the twin: back up at 0.3 (15% of the 2.0 the loss fell) diverged
        (1.12, REDUCED, False),  # reduced precision keeps its 2% of the last losses themselves
    ],
)
def test_divergence_is_measured_on_the_loss_scale(tail, kind, ok):
    candidate = CONVERGING[:-5] + [x * tail for x in CONVERGING[-5:]]
    verdict = check_parity(CONVERGING, candidate, kind=kind)
    assert verdict.ok is ok, verdict.detail


# -- the noise gate, fixed costs, a busy machine ---------------------------------------------

def _baseline_repeats(script):
    return [r for s, r in script.calls if not s]


def test_a_noisy_baseline_keeps_nothing():
    """The baseline against itself varies by 20%: a lever 10% faster does not clear that."""
    script = FakeScript(factors={("optimizer.implementation", "fused"): 0.9}, noise=0.2)
    outcome = run_search(default_levers(), TuneContext(device="cpu", cpu_cores=2, has_loader=False), script,
                         SearchOptions())
    assert outcome.noise > 0.15 and len(outcome.aa_ratios) >= 3  # every pair's A against the one before
    assert outcome.settings == {}
    fused = next(d for d in outcome.decisions if d.lever == "optimizer" and d.status != "screened_out")
    assert fused.status in ("not_beyond_noise", "slower")
    assert any("too noisy" in w for w in outcome.warnings)


def test_the_same_change_on_a_quiet_baseline_is_kept():
    """The twin: 1% noise, the same 10% gain clears it."""
    script = FakeScript(factors={("optimizer.implementation", "fused"): 0.9}, noise=0.01)
    outcome = run_search(default_levers(), TuneContext(device="cpu", cpu_cores=2, has_loader=False), script,
                         SearchOptions())
    assert outcome.settings == {"optimizer.implementation": "fused"} and outcome.warnings == []
    assert _baseline_repeats(script)[:4] == [0, 1, 2, 3]  # its pairs' A's: each a repeat of the baseline


class FixedCostScript(FakeScript):
    """Workers make each step 10% faster but cost 3 s each time the script starts."""

    def __call__(self, settings, repeat, **_):
        result = super().__call__(settings, repeat)
        result.fixed_s = 2.0 + (3.0 if settings.get("loader.num_workers", 0) else 0.0)
        return result


def test_a_fixed_cost_the_planned_run_cannot_repay_is_not_kept():
    ctx = TuneContext(device="cpu", cpu_cores=2)
    short = run_search(default_levers(), ctx, FixedCostScript(), SearchOptions(run_steps=50))
    host = next(d for d in short.decisions if d.lever == "host" and d.status != "screened_out")
    assert host.status == "not_repaid" and "it adds 3.0 s" in host.reason
    # 84 -> 62 ms saves 22 ms/step: 3 s / 22 ms is about 136 steps
    assert host.break_even_steps == pytest.approx(3000 / 22, rel=0.1)
    assert "loader.num_workers" not in short.settings
    long = run_search(default_levers(), ctx, FixedCostScript(), SearchOptions(run_steps=5000))
    assert long.settings["loader.num_workers"] == 2  # the twin: a long run repays it


def test_a_pair_run_on_a_busy_machine_is_measured_again():
    class Busy(FakeScript):
        def __call__(self, settings, repeat, **_):
            result = super().__call__(settings, repeat)
            result.load_pct = 60.0 if settings.get("optimizer.implementation") == "fused" and repeat == 1 else 0.0
            return result

    script = Busy(factors={("optimizer.implementation", "fused"): 0.8})
    outcome = run_search(default_levers(), TuneContext(device="cpu", cpu_cores=2, has_loader=False), script,
                         SearchOptions())
    assert any("other processes used up to 60%" in w for w in outcome.warnings)
    fused_runs = [r for s, r in script.calls if s == {"optimizer.implementation": "fused"}]
    assert len(fused_runs) >= 3  # screening, the busy pair, the pair measured again
    assert outcome.settings == {"optimizer.implementation": "fused"}


@pytest.mark.parametrize("load, warned", [(50.0, True), (10.0, False)])
def test_a_machine_busy_throughout_is_said_though_no_pair_stands_out(load, warned):
    # Another process took half the machine in every trial, the baseline's too (a 2-thread
    # matmul loop beside the vision workload: 1269 ms a step): no pair is busier than the
    # baseline, so only this says it. Twin: a little load is not worth a word.
    class Busy(FakeScript):
        def __call__(self, settings, repeat, **_):
            result = super().__call__(settings, repeat)
            result.load_pct = load
            return result

    outcome = run_search(default_levers(), TuneContext(device="cpu", cpu_cores=2, has_loader=False), Busy(),
                         SearchOptions())
    said = [w for w in outcome.warnings if "while the baseline ran" in w]
    assert bool(said) is warned
    assert not warned or f"used {load:.0f}% of the machine" in said[0]


def test_bf16_is_skipped_when_the_probe_shows_its_matmul_far_slower():
    slow = TuneContext(device="cpu", cpu_cores=2, tuning=(PrecisionTuning(cpu_bf16_speedup=0.01),))
    script = FakeScript()
    outcome = run_search(default_levers(), slow, script, SearchOptions())
    bf16 = next(d for d in outcome.decisions if d.lever == "precision")
    assert bf16.status == "skipped" and "0.01x fp32's speed" in bf16.reason
    assert not any(s.get("precision.mode") == "bf16" for s, _ in script.calls)  # never run
    # the twin: tried and measured
    near = TuneContext(device="cpu", cpu_cores=2, tuning=(PrecisionTuning(cpu_bf16_speedup=0.9),))
    tried = FakeScript()
    run_search(default_levers(), near, tried, SearchOptions())
    assert any(s.get("precision.mode") == "bf16" for s, _ in tried.calls)


def test_a_screened_candidate_far_slower_stops_early():
    class Stoppable(FakeScript):
        def __call__(self, settings, repeat, slower_than_ms=None, **_):
            result = super().__call__(settings, repeat)
            if slower_than_ms is not None and result.ms_per_step > slower_than_ms:
                result.step_ms, result.stopped_early = result.step_ms[:5], True
            return result

    script = Stoppable(factors={("precision.mode", "bf16"): 3.0})
    outcome = run_search(default_levers(), CPU2, script, SearchOptions())
    bf16 = next(d for d in outcome.decisions if d.lever == "precision")
    assert bf16.status == "slower" and "stopped after 5 steps" in bf16.reason
    assert [r for s, r in script.calls if s.get("precision.mode") == "bf16"] == [0]  # never paired
    # the twin: a measure that cannot stop a trial runs it in full, and pairs confirm it
    full = FakeScript(factors={("precision.mode", "bf16"): 3.0})
    outcome = run_search(default_levers(), CPU2, full, SearchOptions())
    assert len([r for s, r in full.calls if s.get("precision.mode") == "bf16"]) > 1


# A vision trial's losses (43 steps) with 0 workers, and with persistent workers: the same
# batches for the first epoch (32 steps), then another shuffle order (persistent workers
# draw no new base seed from the loader's generator at the second epoch), so other batches.
_ZERO_WORKERS = [1.37, 1.37, 1.46, 1.37, 1.38, 1.35, 1.38, 1.4, 1.4, 1.31, 1.29, 1.28, 1.15, 1.16, 1.11, 1.0,
                 1.01, 0.96, 0.86, 0.8, 0.69, 0.74, 0.61, 0.55, 0.5, 0.39, 0.42, 0.4, 0.33, 0.44, 0.36, 0.27,
                 0.14, 0.45, 0.15, 0.17, 0.13, 0.22, 0.14, 0.08, 0.16, 0.07, 0.03]
_PERSISTENT = _ZERO_WORKERS[:31] + [0.22, 0.25, 0.22, 0.18, 0.27, 0.1, 0.11, 0.44, 0.17, 0.16, 0.24, 0.15]


def test_other_batches_after_the_first_epoch_are_not_a_divergence():
    from torchboost.tune.search.parity import STATISTICAL

    verdict = check_parity(_ZERO_WORKERS, _PERSISTENT, kind=STATISTICAL)
    assert verdict.ok, verdict.detail


def test_twin_a_run_that_stops_learning_after_the_first_epoch_still_diverges():
    from torchboost.tune.search.parity import STATISTICAL

    stalled = _ZERO_WORKERS[:31] + [0.36] * 12  # flat where the baseline kept falling
    verdict = check_parity(_ZERO_WORKERS, stalled, kind=STATISTICAL)
    assert not verdict.ok and "diverged" in verdict.detail


def test_the_saving_a_fixed_cost_is_weighed_against_follows_the_paired_ratio():
    from torchboost.tune.search.decision import paired_step_ms

    # The machine slowed down at the third pair: the candidate is 4% faster in two pairs of
    # three, yet the median of its steps (86.4) is far above the incumbent's (60).
    incumbent, candidate = [60.0, 60.0, 90.0], [57.6, 86.4, 86.4]
    ratios = [c / i for i, c in zip(incumbent, candidate)]
    assert paired_step_ms(incumbent, ratios) == pytest.approx(57.6)  # saves 2.4 ms a step
    assert statistics.median(incumbent) - statistics.median(candidate) < 0  # the twin: unpaired, "never pays off"
