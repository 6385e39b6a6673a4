"""Too busy to tell: a noise floor wider than the top candidate's gain is said, with what to do."""

from __future__ import annotations

import dataclasses

import pytest

from slow_script import SlowScript
from test_search import CPU2

from torchboost.evidence.findings import Measured
from torchboost.techniques.precision import PrecisionTuning
from torchboost.tune.search.levers import default_levers, order_levers
from torchboost.tune.search import SearchOptions, run_search
from torchboost.tune.trials.trial_result import TrialResult


@pytest.mark.parametrize("noise, busy", [(0.4, True), (0.01, False)])
def test_a_floor_wider_than_the_top_gain_says_too_busy_to_tell(noise, busy):
    measured = {"precision.lower": Measured(1.1, 6, "bf16 autocast")}  # at most 9% faster
    script = SlowScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.92}, noise=noise, load_pct=70.0)
    context = dataclasses.replace(CPU2, measured=measured, has_loader=False)
    levers = [lv for lv in order_levers(default_levers(), {}, measured) if lv.id == "precision"]
    outcome = run_search(levers, context, script, SearchOptions(budget_s=2000), clock=script.clock)
    said = [w for w in outcome.warnings if w.startswith("too busy to tell")]
    assert bool(said) is busy  # twin: quiet, the 8% gain is told apart and kept
    if busy:
        assert said[0].startswith("too busy to tell: other processes used up to 70% of the machine")
        assert "more than the 9% bf16 could gain (x1.10 by the doctor)" in said[0]
        assert "tune would measure it first and decide in about" in said[0]
        assert any("tune again on a quieter machine" in w for w in outcome.warnings)
    else:
        assert outcome.settings.get("precision.mode") == "bf16"


def test_the_same_floor_with_nobody_else_on_the_machine_is_the_scripts_own_noise():
    """Runs varied by 40% while other processes used 2% of the machine: no other process to
    wait for. It is said as too noisy to tell, with longer trials as the remedy, not a
    quieter machine (twin of the busy case above, where the load is 70%)."""
    measured = {"precision.lower": Measured(1.1, 6, "bf16 autocast")}
    script = SlowScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.92}, noise=0.4, load_pct=2.0)
    context = dataclasses.replace(CPU2, measured=measured, has_loader=False)
    levers = [lv for lv in order_levers(default_levers(), {}, measured) if lv.id == "precision"]
    outcome = run_search(levers, context, script, SearchOptions(budget_s=2000), clock=script.clock)
    assert not any("busy" in w or "quieter machine" in w for w in outcome.warnings), outcome.warnings
    said = [w for w in outcome.warnings if w.startswith("too noisy to tell")]
    assert said and "with other processes using at most 2% of the machine" in said[0]
    assert "more than the 9% bf16 could gain" in said[0] and "longer trials (--steps-per-trial)" in said[0]
    assert any("the script's own runs vary this much" in w and "A/A ratios" in w for w in outcome.warnings)


@pytest.mark.parametrize("budget_s, unmeasured", [(100.0, True), (2000.0, False)])
def test_a_budget_spent_before_the_top_candidate_says_so_and_what_it_would_take(budget_s, unmeasured):
    """The baseline alone outlasts the budget (a busy machine, slow steps): tune says the top
    candidate was never measured and how much more budget it needs, and its verdict is not
    'nothing was faster'. Twin: budget enough, the candidate is measured."""
    from torchboost.tune.search.decision import TuneOutcome
    from torchboost.tune.verify.end_to_end import nothing_kept as _nothing_kept

    measured = {"precision.lower": Measured(1.8, 6, "bf16 autocast")}
    script = SlowScript(step_ms=4000.0, factors={("precision.mode", "bf16"): 0.6})
    context = dataclasses.replace(CPU2, measured=measured, has_loader=False)
    levers = [lv for lv in order_levers(default_levers(), {}, measured) if lv.id == "precision"]
    outcome: TuneOutcome = run_search(levers, context, script, SearchOptions(budget_s=budget_s), clock=script.clock)
    said = [w for w in outcome.warnings if "before the top candidate" in w]
    assert bool(said) is unmeasured
    if unmeasured:
        assert said[0].startswith("too busy to tell: the budget ran out before the top candidate, bf16 autocast "
                                  "(x1.80 by the doctor), was measured; a trial took 150 s")
        assert "give it about 1050 s more of --budget" in said[0]
        assert _nothing_kept(outcome) == "nothing was measured: the budget ran out after the baseline"
    else:
        assert outcome.settings.get("precision.mode") == "bf16"


@pytest.mark.parametrize("noise, busy", [(0.4, True), (0.01, False)])
def test_too_busy_without_a_doctors_measurement_names_the_first_undecided_candidate(noise, busy):
    """No quick probe measured anything (its steps were cut short on the busy machine): the
    warning names the first candidate the noise left undecided. Twin: quiet, it is decided."""
    script = SlowScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.92}, noise=noise, load_pct=70.0)
    context = dataclasses.replace(CPU2, has_loader=False)
    levers = [lv for lv in default_levers() if lv.id == "precision"]
    outcome = run_search(levers, context, script, SearchOptions(budget_s=2000), clock=script.clock)
    said = [w for w in outcome.warnings if w.startswith("too busy to tell")]
    assert bool(said) is busy
    if busy:
        assert "too much to tell bf16 apart; on a quieter machine tune would measure it first" in said[0]


@pytest.mark.parametrize("second_busy, status", [(False, "kept"), (True, "slower")])
def test_a_trial_stopped_as_slower_while_the_machine_was_busy_is_measured_again(second_busy, status):
    """bf16's first screening trial ran beside another process (80% of the machine) and was
    stopped at 20x the incumbent: measured again, on a quiet machine it is kept. Twin: busy
    again, it is slower, and its reason says it was measured twice beside that load."""
    calls = []

    def measure(settings, repeat, slower_than_ms=None, **_):
        bf16 = settings.get("precision.mode") == "bf16"
        calls.append(dict(settings))
        busy = bf16 and (len([c for c in calls if c.get("precision.mode") == "bf16"]) == 1 or second_busy)
        ms = 2000.0 if busy else (60.0 if bf16 else 100.0)
        stopped = slower_than_ms is not None and ms > slower_than_ms
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms] * (5 if stopped else 30),
                           losses=[1.0] * 30, samples_per_step=16, load_pct=80.0 if busy else 0.0,
                           stopped_early=stopped)

    levers = [lv for lv in default_levers() if lv.id == "precision"]
    outcome = run_search(levers, CPU2.with_own(PrecisionTuning(cpu_bf16=True)), measure, SearchOptions(run_steps=1000))
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    assert decision.status == status, decision.reason
    assert len([c for c in calls if c.get("precision.mode") == "bf16"]) >= 2
    if status == "slower":
        assert "measured twice; other processes used 80% of the machine" in decision.reason
    assert len([w for w in outcome.warnings if w.startswith("other processes used up to")]) == 1


def test_the_load_said_is_the_most_any_trial_saw_not_the_baselines():
    """Too busy to tell said "other processes used 1% of the machine" (the baseline's, before
    the neighbour started) beside a warning of 67%: the runner keeps the most any trial saw."""
    from torchboost.config import Overlay
    from torchboost.tune.budget import TuneBudget
    from torchboost.tune.search.pairs import Runner

    loads = iter([1.0, 67.0, 20.0])
    runner = Runner(lambda settings, repeat, **_: TrialResult(settings=dict(settings), repeat=repeat, step_ms=[1.0],
                                                         load_pct=next(loads)), TuneBudget(100.0, clock=lambda: 0.0))
    for _ in range(3):
        runner(Overlay())
    assert runner.max_load_pct == 67.0
