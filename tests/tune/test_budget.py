"""--budget bounds the whole tune: the end-to-end check gets what is left, or is skipped and said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchboost.config import BoostConfig, Overlay
from torchboost.tune import ending, tuner
from torchboost.tune.search.decision import TuneOutcome
from torchboost.tune.trials.trial_result import TrialResult
from torchboost.tune.verify.end_to_end import EndToEnd


def _outcome(step_ms: float = 10.0, wall_s: float = 10.0, fixed_s: float = 9.5) -> TuneOutcome:
    baseline = TrialResult(settings=Overlay(), step_ms=[step_ms] * 5, wall_s=wall_s, fixed_s=fixed_s)
    from torchboost.tune.search.decision import WaterfallStep
    return TuneOutcome(baseline=baseline, settings=Overlay({"cpu.threads": 1}),
                       waterfall=[WaterfallStep("baseline", Overlay(), step_ms, 1.0, 0.0)], decisions=[], trials_run=3,
                       elapsed_s=50.0)


@pytest.mark.parametrize("time_left_s, checked", [(15.0, False), (100.0, True)])
def test_the_check_takes_what_the_budget_leaves_or_is_skipped_and_said(monkeypatch, tmp_path, time_left_s, checked):
    seen = {}

    def fake_verify(command, base, settings, plan, **kwargs):
        seen["budget_s"] = plan.budget_s
        return EndToEnd(baseline_runs_s=[10.0] * 4, tuned_runs_s=[8.0] * 4)

    monkeypatch.setattr(ending, "verify", fake_verify)
    options = tuner.TuneOptions(out_dir=Path(tmp_path), config_path=Path(tmp_path) / "t.toml", budget_s=300.0)
    settings, e2e, verdict = ending.verify_outcome(["python", "x.py"], options, BoostConfig.off(), _outcome(), None, None,
                                           {}, time_left_s=time_left_s)
    assert settings == Overlay({"cpu.threads": 1})
    if checked:  # twin: time enough, the check runs within it (not the configured 150 s)
        assert seen["budget_s"] == 100.0 and e2e is not None and verdict.startswith("verified end to end")
    else:
        assert not seen and e2e is None
        assert verdict.startswith("not verified end to end: --budget left 15 s")


@pytest.mark.parametrize("step_ms, checked", [(1500.0, True), (10.0, False)])
def test_slow_steps_are_checked_in_runs_short_enough_for_what_is_left(monkeypatch, tmp_path, step_ms, checked):
    """1.5 s steps: a trial took 68 s, but a pair of runs stopped after 20 steps (10 s + 30 s
    each) fits the 110 s left. Twin: a baseline whose start-up alone (60 s) leaves no pair."""
    seen = {}

    def fake_verify(command, base, settings, plan, **kwargs):
        seen["steps"] = plan.fallback_steps
        return EndToEnd(baseline_runs_s=[68.0] * 3, tuned_runs_s=[50.0] * 3)

    monkeypatch.setattr(ending, "verify", fake_verify)
    options = tuner.TuneOptions(out_dir=Path(tmp_path), config_path=Path(tmp_path) / "t.toml", budget_s=300.0,
                                steps_per_trial=30, warmup=5)
    outcome = _outcome(step_ms, wall_s=68.0, fixed_s=10.0 if step_ms > 100 else 60.0)
    _, e2e, verdict = ending.verify_outcome(["python", "x.py"], options, BoostConfig.off(), outcome, 3000, None, {},
                                    time_left_s=110.0)
    assert (e2e is not None) is checked
    if checked:
        assert seen["steps"] == 20
    else:
        assert verdict.startswith("not verified end to end: --budget left 110 s")


@pytest.mark.parametrize("left_s, words", [(5.0, "ran past the end of --budget 300 s"), (None, "timed out after")])
def test_a_trial_cut_by_the_budget_says_so(monkeypatch, tmp_path, left_s, words):
    """A trial stopped because --budget (and its slack) ran out says so and what to do; twin:
    one stopped by its own time limit keeps its words."""
    import math
    import time

    from torchboost.tune.trials.journal import Journal

    def timed_out(request):
        return TrialResult(settings=request.settings, repeat=request.repeat, ok=False,
                           error=f"timed out after {request.timeout_s:.0f} s")

    monkeypatch.setattr(tuner, "run_trial", timed_out)
    options = tuner.TuneOptions(out_dir=Path(tmp_path), config_path=Path(tmp_path) / "t.toml", budget_s=300.0,
                                steps_per_trial=12, trial_timeout_s=200.0)
    deadline = math.inf if left_s is None else time.monotonic() + left_s
    measure = tuner._journaled_measure(Journal(tmp_path / "j.jsonl"), ["python", "x.py"], options, BoostConfig.off(),
                                       None, deadline)
    result = measure(Overlay(), 0)
    assert result.error.startswith(words)
    if left_s is not None:
        assert result.error.endswith("give tune a larger --budget")


@pytest.mark.parametrize("run_s, kept", [(5.0, 40.0), (10.0, 20.0), (30.0, 60.0), (100.0, 0.0)])
def test_the_checks_reserve_is_four_pairs_else_one_else_none(run_s, kept):
    """Runs of 5 s: four pairs (40 s) fit the 75 s the check may have. 10 s or 30 s (whole
    runs, no shorter): one pair (a second pair cannot make a claim either; the search has the
    time). 100 s: not even a pair fits, so nothing is kept back from the search (the check
    is skipped and says so)."""
    from torchboost.tune.verify import reserve_s

    assert reserve_s(run_s, run_s, 10.0, trial_steps=30, warmup=5, most_s=75.0) == kept


@pytest.mark.parametrize("most_s", [225.0, 100.0])
def test_the_reserve_of_a_slow_step_holds_a_pair_at_its_pace_shortened(most_s):
    """A 4 s-step baseline (a busy machine), 6 s outside its steps: four pairs fit neither
    225 s nor 100 s, so one pair is kept, of runs cut to the warm-up and 4 steps (84 s), not
    of 17-step runs (148 s: the search then had no time after its baseline). Twin: the
    reserve of runs the check cannot shorten would keep nothing at 100 s."""
    from torchboost.tune.verify import reserve_s, shortest_run_s

    assert reserve_s(2000.0, 6.0, 4000.0, trial_steps=12, warmup=5, most_s=most_s) == pytest.approx(2 * (6.0 + 9 * 4.0))
    assert 2 * shortest_run_s(2000.0, 6.0, 4000.0, trial_steps=12, warmup=5) > 100.0


@pytest.mark.parametrize("budget_s", [120.0, 300.0, 600.0])
def test_the_check_may_take_all_the_search_kept_for_it(monkeypatch, tmp_path, budget_s):
    """The reserve the search keeps (four pairs of a 1 s-step transformer's capped runs,
    ~45 s a pair, where they fit) is within the check's own budget, with time enough left:
    a check given --budget x 0.5 while 0.75 x was reserved ran three of the four pairs.
    Twin: that smaller budget holds less than the reserve at --budget 300."""
    seen = {}

    def fake_verify(command, base, settings, plan, **kwargs):
        seen["budget_s"] = plan.budget_s
        return EndToEnd(baseline_runs_s=[28.0] * 4, tuned_runs_s=[18.0] * 4)

    monkeypatch.setattr(ending, "verify", fake_verify)
    options = tuner.TuneOptions(out_dir=Path(tmp_path), config_path=Path(tmp_path) / "t.toml", budget_s=budget_s)
    outcome = _outcome(step_ms=1125.0, wall_s=2300.0, fixed_s=3.0)
    kept = ending.check_reserve(options)(outcome.baseline)
    ending.verify_outcome(["python", "x.py"], options, BoostConfig.off(), outcome, 2000, None, {}, time_left_s=1e6)
    assert kept > 0 and seen["budget_s"] >= kept
    if budget_s == 300.0:
        assert kept > budget_s * ending.BUDGET_SLACK  # the old check's budget would not hold it


def test_a_trial_is_told_the_time_left_before_the_checks_reserve():
    """The search keeps 100 s of a 300 s deadline for the check: a trial started at 150 s may
    run 50 s, not the 150 s the deadline alone leaves (a burst trial of 4 s steps ran into
    the check's time, which then finished no pair). Twin: a measure that takes no limit is
    not given one."""
    from torchboost.tune.search.pairs import Runner

    now, seen = [0.0], []

    def measure(settings, repeat, limit_s=None):
        seen.append(limit_s)
        now[0] += 150.0
        return TrialResult(settings=dict(settings), step_ms=[10.0])

    runner = Runner(measure, budget_s=1000.0, clock=lambda: now[0], deadline_s=300.0)
    runner.keep_back(100.0)
    runner(Overlay())
    runner(Overlay())
    assert seen == [pytest.approx(200.0), pytest.approx(50.0)]
    plain = Runner(lambda settings, repeat: TrialResult(settings=dict(settings)), budget_s=1000.0,
                   clock=lambda: 0.0, deadline_s=300.0)
    plain(Overlay())  # a measure without limit_s: called as before, no keyword it cannot take


def test_a_burst_trial_is_not_started_where_the_typical_burst_trial_would_not_fit():
    """Screening trials stopped early took 10 s each, burst trials 80 s: at 150 s of a search
    that must end by 200 s, another burst trial would run into the check's time; a screening
    trial still fits. The search's seconds are told apart by kind."""
    from torchboost.observe.spec import Bursts
    from torchboost.tune.search.pairs import Runner

    now = [0.0]

    def measure(settings, repeat, bursts=None):
        now[0] += 80.0 if bursts else 10.0
        return TrialResult(settings=dict(settings))

    runner = Runner(measure, budget_s=1000.0, clock=lambda: now[0], deadline_s=300.0)
    runner.keep_back(100.0)
    for _ in range(3):
        runner(Overlay())
    runner(Overlay(), bursts=Bursts(change={"precision.mode": "bf16"}, steps=1, pairs=6))
    now[0] = 150.0
    assert runner.out_of_budget(bursts=True) and not runner.out_of_budget()
    assert runner.spent_s == {"bursts": 80.0, "trials": 30.0}


def test_the_reserve_follows_the_pace_kept_so_far():
    """A 9 s-step baseline beside a busy loop: a pair of shortened runs at its pace is 174 s;
    once one thread is kept at 3 s a step, the pair's tuned run takes 33 s, not 87, and the
    search gets back the difference. Twin: without the kept pace, both runs at the baseline's."""
    from torchboost.tune.verify import reserve_s

    both = reserve_s(2000.0, 6.0, 9000.0, trial_steps=12, warmup=5, most_s=225.0)
    kept = reserve_s(2000.0, 6.0, 9000.0, trial_steps=12, warmup=5, most_s=225.0, tuned_ms=3000.0)
    assert both == pytest.approx(2 * (6.0 + 9 * 9.0)) and kept == pytest.approx((6.0 + 9 * 9.0) + (6.0 + 9 * 3.0))


def test_the_search_keeps_back_less_once_a_faster_change_is_kept():
    """One search, bf16 kept at 0.75 of a 1 s step: the reserve is asked at the baseline's pace
    first, then at the kept 0.75 s."""
    import dataclasses

    from test_bursts import BusyScript
    from test_search import CPU2
    from torchboost.tune.search import SearchOptions, run_search
    from torchboost.tune.search.levers import default_levers

    seen: list[float | None] = []

    def reserve(baseline, tuned_ms):
        seen.append(tuned_ms)
        return 50.0

    script = BusyScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.75}, noise=0.01)
    levers = [lv for lv in default_levers() if lv.id == "precision"]
    outcome = run_search(levers, dataclasses.replace(CPU2, has_loader=False), script.measure,
                         SearchOptions(budget_s=2000, deadline_s=3000), clock=script.clock, reserve=reserve)
    assert outcome.settings.get("precision.mode") == "bf16"
    assert seen[0] is None and seen[-1] == pytest.approx(750.0, rel=0.05)
