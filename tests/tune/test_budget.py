"""--budget bounds the whole tune: one budget object grants each part its time; the end-to-end
check gets what is left, or is skipped and said so; no other module of tune/ reads the clock
against an end."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from torchboost.config import BoostConfig, Overlay
from torchboost.tune import ending, tuner
from torchboost.tune.budget import BUDGET_SLACK, TuneBudget
from torchboost.tune.search.decision import TuneOutcome
from torchboost.tune.trials.trial_result import TrialResult
from torchboost.tune.verify.end_to_end import EndToEnd


def _outcome(step_ms: float = 10.0, wall_s: float = 10.0, fixed_s: float = 9.5) -> TuneOutcome:
    baseline = TrialResult(settings=Overlay(), step_ms=[step_ms] * 5, wall_s=wall_s, fixed_s=fixed_s)
    from torchboost.tune.search.decision import WaterfallStep
    return TuneOutcome(baseline=baseline, settings=Overlay({"cpu.threads": 1}),
                       waterfall=[WaterfallStep("baseline", Overlay(), step_ms, 1.0, 0.0)], decisions=[], trials_run=3,
                       elapsed_s=50.0)


def _check_budget(seconds: float) -> TuneBudget:
    """A check's own budget of ``seconds``, on a clock that does not move."""
    return TuneBudget(seconds, whole_s=seconds, clock=lambda: 0.0)


@pytest.mark.parametrize("time_left_s, checked", [(15.0, False), (100.0, True)])
def test_the_check_takes_what_the_budget_leaves_or_is_skipped_and_said(monkeypatch, tmp_path, time_left_s, checked):
    seen = {}

    def fake_verify(command, base, settings, plan, **kwargs):
        seen["budget_s"] = plan.budget_s
        return EndToEnd(baseline_runs_s=[10.0] * 4, tuned_runs_s=[8.0] * 4)

    monkeypatch.setattr(ending, "verify", fake_verify)
    options = tuner.TuneOptions(out_dir=Path(tmp_path), config_path=Path(tmp_path) / "t.toml", budget_s=300.0)
    settings, e2e, verdict = ending.verify_outcome(["python", "x.py"], options, BoostConfig.off(), _outcome(), None, None,
                                                   {}, budget=_check_budget(time_left_s))
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
                                            budget=_check_budget(110.0))
    assert (e2e is not None) is checked
    if checked:
        assert seen["steps"] == 20
    else:
        assert verdict.startswith("not verified end to end: --budget left 110 s")


@pytest.mark.parametrize("left_s, words", [(5.0, "ran past the end of --budget 300 s"), (None, "timed out after"),
                                           (0.5, "ran past the end of --budget 300 s")])
def test_a_trial_cut_by_the_budget_says_so(monkeypatch, tmp_path, left_s, words):
    """A trial stopped at the seconds the budget granted it says so and what to do; one
    granted less than a second is not started; twin: one stopped by its own time limit keeps
    its words."""
    from torchboost.tune.trials.journal import Journal

    started = []

    def timed_out(request):
        started.append(request.timeout_s)
        return TrialResult(settings=request.settings, repeat=request.repeat, ok=False,
                           error=f"timed out after {request.timeout_s:.0f} s")

    monkeypatch.setattr(tuner, "run_trial", timed_out)
    options = tuner.TuneOptions(out_dir=Path(tmp_path), config_path=Path(tmp_path) / "t.toml", budget_s=300.0,
                                steps_per_trial=12, trial_timeout_s=200.0)
    measure = tuner._journaled_measure(Journal(tmp_path / "j.jsonl"), ["python", "x.py"], options, BoostConfig.off(),
                                       None)
    result = measure(Overlay(), 0, slower_than_ms=None, decide=None, bursts=None, limit_s=left_s)
    assert result.error.startswith(words)
    assert started == ([] if left_s == 0.5 else [200.0 if left_s is None else left_s])
    if left_s is not None:
        assert result.error.endswith("give tune a larger --budget")


@pytest.mark.parametrize("run_s, kept", [(4.0, 56.0 / 0.75), (5.0, 40.0), (8.0, 64.0), (10.0, 20.0), (30.0, 60.0),
                                         (100.0, 0.0)])
def test_the_checks_reserve_is_seven_pairs_else_four_else_one_else_none(run_s, kept):
    """Runs of 4 s: seven pairs (56 s: the four a claim rests on and the three an open verdict
    needs), over the plan's fill (0.75), fit the 75 s the check may have. 5 s and 8 s: four
    pairs (40 s, 64 s). 10 s or 30 s (whole
    runs, no shorter): one pair (a second pair cannot make a claim either; the search has the
    time). 100 s: not even a pair fits, so nothing is kept back from the search (the check
    is skipped and says so)."""
    from torchboost.tune.verify import reserve_s

    assert reserve_s(run_s, run_s, 10.0, trial_steps=30, warmup=5, most_s=75.0) == pytest.approx(kept)


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
    kept = ending.check_reserve(options, TuneBudget(budget_s))(outcome.baseline)
    ending.verify_outcome(["python", "x.py"], options, BoostConfig.off(), outcome, 2000, None, {},
                          budget=TuneBudget(budget_s, clock=lambda: 0.0).for_check())
    assert kept > 0 and seen["budget_s"] >= kept
    if budget_s == 300.0:
        assert kept > budget_s * BUDGET_SLACK  # the old check's budget would not hold it


def test_a_trial_is_told_the_time_left_before_the_checks_reserve():
    """The search keeps 100 s of a 300 s deadline for the check: a trial started at 150 s may
    run 50 s, not the 150 s the deadline alone leaves (a burst trial of 4 s steps ran into
    the check's time, which then finished no pair). Twin: a budget with no end grants no limit."""
    from torchboost.tune.search.pairs import Runner

    now, seen = [0.0], []

    def measure(settings, repeat, *, limit_s=None, **stops):
        seen.append(limit_s)
        now[0] += 150.0
        return TrialResult(settings=dict(settings), step_ms=[10.0])

    budget = TuneBudget(1000.0, whole_s=300.0, clock=lambda: now[0])
    budget.keep_for_check(100.0)
    runner = Runner(measure, budget)
    runner(Overlay())
    runner(Overlay())
    assert seen == [pytest.approx(200.0), pytest.approx(50.0)]
    unbounded = Runner(measure, TuneBudget(1000.0, whole_s=math.inf, clock=lambda: now[0]))
    unbounded(Overlay())
    assert seen[-1] is None  # no end: no limit


def test_a_burst_trial_is_not_started_where_the_typical_burst_trial_would_not_fit():
    """Screening trials stopped early took 10 s each, burst trials 80 s: at 150 s of a search
    that must end by 200 s, another burst trial would run into the check's time; a screening
    trial still fits. The search's seconds are told apart by kind."""
    from torchboost.plan import Bursts
    from torchboost.tune.search.pairs import Runner

    now = [0.0]

    def measure(settings, repeat, *, bursts=None, **stops):
        now[0] += 80.0 if bursts else 10.0
        return TrialResult(settings=dict(settings))

    budget = TuneBudget(1000.0, whole_s=300.0, clock=lambda: now[0])
    budget.keep_for_check(100.0)
    runner = Runner(measure, budget)
    for _ in range(3):
        runner(Overlay())
    runner(Overlay(), bursts=Bursts(change={"precision.mode": "bf16"}, steps=1, pairs=6))
    now[0] = 150.0
    assert not budget.affords_burst(planned_s=5.0) and budget.affords_trial()
    assert budget.spent_s == {"bursts": 80.0, "trials": 30.0}


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


# -- the budget object: what it grants is what a part may spend ---------------------------

def test_the_budget_grants_no_part_more_than_is_left_before_the_checks_reserve_and_the_ending():
    """--budget 100 (150 s in all), 10 s spent before it was made, 40 s kept for the check,
    3 s for the ending: at 60 s a trial asking 500 s gets 47, the check then gets what is
    left before the ending (at most half the whole), and nothing is granted past the end."""
    now = [0.0]
    budget = TuneBudget(100.0, clock=lambda: now[0], spent_s=10.0, ending_s=3.0)
    budget.keep_for_check(40.0)
    now[0] = 50.0
    assert budget.grant(500.0) == pytest.approx(150 - 3 - 40 - 60)
    assert budget.affords_trial(40.0) and not budget.affords_trial(50.0)
    assert budget.affords_trial(40.0, finishing=True)
    now[0] = 95.0  # --budget spent: no new trial, one finishing a decision may still start
    assert not budget.affords_trial(1.0) and budget.affords_trial(1.0, finishing=True)
    check = budget.for_check()
    assert check.left_s() == pytest.approx(150 - 3 - 105) and check.check_reserve_s == 0.0
    assert check.left_s() >= budget.check_reserve_s  # the check keeps its reserve
    now[0] = 500.0
    assert budget.grant(500.0) == 0.0 and check.grant(10.0) == 0.0 and not check.affords(0.0)
    budget.keep_for_check(1e9)
    assert budget.check_reserve_s == budget.check_most_s == pytest.approx(75.0)


def test_a_pair_and_a_burst_trial_are_priced_by_their_own_kind():
    """Trials of 10 s and a burst trial of 80 s: a pair costs 20 s, a burst trial 80 (its
    planned length only before any ran)."""
    now = [0.0]
    budget = TuneBudget(1000.0, whole_s=300.0, clock=lambda: now[0])
    assert budget.affords_burst(planned_s=290.0) and not budget.affords_burst(planned_s=310.0)
    for seconds in (10.0, 10.0):
        budget.record(seconds)
    budget.record(80.0, burst=True)
    now[0] = 250.0
    assert budget.affords_pair() and not budget.affords_burst(planned_s=1.0)
    now[0] = 285.0
    assert not budget.affords_pair() and budget.affords_trial()


# -- acceptance: a whole tune on a fake clock, every part asking more than is left ---------

LOSSES = [2.0 - 0.01 * i for i in range(40)]


class _Greedy:
    """A 2 s-step script on a fake clock (10 s of start-up a run), one thread at 0.75 of its
    step, in which every part asks more than is left: bf16 trials compile for 200 s, whole
    runs take the script's 2000 steps, and the report takes 2 s. Each run takes what it
    wants, or its limit when that is less (it is then ended)."""

    def __init__(self):
        self.now = 0.0
        self.check_granted: list[float] = []
        self.reserves: list[float] = []

    def clock(self) -> float:
        return self.now

    def _spend(self, want_s: float, limit_s: float | None) -> bool:
        """Advance the clock by what the run takes; False when it was ended at its limit."""
        ended = limit_s is not None and want_s > limit_s
        self.now += limit_s if ended else want_s
        return not ended

    @staticmethod
    def _ms(settings) -> float:
        return 2000.0 * (0.75 if dict(settings).get("cpu.threads") == 1 else 1.0)

    def run_trial(self, request):
        bursts = getattr(request.plan, "bursts", None) or getattr(request, "bursts", None)
        settings, ms = dict(request.settings), self._ms(request.settings)
        compiles = "precision.mode" in settings or (bursts is not None and "precision.mode" in bursts.change)
        want_s = 10.0 + (request.warmup + request.steps) * ms / 1e3 + (200.0 if compiles else 0.0)
        if not self._spend(want_s, request.timeout_s):
            return TrialResult(settings=settings, repeat=request.repeat, ok=False,
                               error=f"timed out after {request.timeout_s:.0f} s")
        if bursts is not None:
            switched = self._ms({**settings, **bursts.change})
            return TrialResult(settings=settings, repeat=request.repeat, step_ms=[ms] * 2, samples_per_step=16,
                               bursts=dict(bursts.change), burst_plain_ms=[ms] * bursts.pairs,
                               burst_switched_ms=[switched] * bursts.pairs, wall_s=want_s, fixed_s=10.0)
        return TrialResult(settings=settings, repeat=request.repeat, step_ms=[ms] * request.steps,
                           losses=LOSSES[:request.warmup + request.steps], samples_per_step=16, wall_s=want_s,
                           fixed_s=10.0)

    def capped_run(self, command, applied, steps, out_dir, limit_s=None, writes_ledger=None):
        ms = 2000.0 if applied.config == BoostConfig.off() else 1500.0
        want_s = 10.0 + steps * ms / 1e3
        return (want_s, ms, None) if self._spend(want_s, limit_s) else None

    def whole_run(self, command, config_file, limit_s, out_dir, writes_ledger=None):
        return 10.0 + 2000 * 2.0 if self._spend(10.0 + 2000 * 2.0, limit_s) else None

    def report(self, *args, **kwargs):
        self.now += 2.0  # the configuration, the report, the machine's peak
        return {}


def _greedy_tune(monkeypatch, tmp_path, budget_class):
    from torchboost.diagnose import Facts, StepRecord
    from torchboost.tune.verify import check

    machine = _Greedy()

    class Watched(budget_class):
        def keep_for_check(self, seconds):
            super().keep_for_check(seconds)
            machine.reserves.append(self.check_reserve_s)

        def for_check(self):
            granted = super().for_check()
            machine.check_granted.append(granted.left_s())
            return granted

    monkeypatch.setattr(tuner, "TuneBudget", Watched)
    monkeypatch.setattr(tuner, "run_trial", machine.run_trial)
    monkeypatch.setattr(tuner, "_peak", machine.report)
    monkeypatch.setattr(check, "_capped_run", machine.capped_run)
    monkeypatch.setattr(check, "_whole_run", machine.whole_run)
    (tmp_path / "train.py").write_text("print('train')\n")
    options = tuner.TuneOptions(out_dir=tmp_path / "out", config_path=tmp_path / "t.toml", budget_s=120.0,
                                steps_per_trial=12, warmup=5, run_steps=2000)
    facts = Facts(env={"device": "cpu", "cpu_cores": 2}, steps=[StepRecord(i, 2000.0) for i in range(6)])
    run = tuner.tune_script(["python", str(tmp_path / "train.py"), "--max-steps", "2000"], options, facts=facts,
                            spent_s=10.0, clock=machine.clock)
    return machine, run


class _Bypassed(TuneBudget):
    """The budget object bypassed: each part granted what it asks, as each priced its own work."""

    def affords(self, price_s, *, finishing=False):
        return True

    def grant(self, wanted_s):
        return wanted_s

    def for_check(self):
        return _Bypassed(self.check_most_s, whole_s=self.check_most_s, clock=self._clock)


@pytest.mark.parametrize("bypassed", [False, True])
def test_a_tune_whose_every_part_asks_more_than_is_left_ends_by_its_deadline(monkeypatch, tmp_path, bypassed):
    """--budget 120, 10 s spent before the tune (the process's start, a doctor run): the
    search would try every lever, bf16's trials compile for 200 s, whole runs take 67 min,
    the report 2 s. The tune ends by 180 s, and the check is granted at least the reserve
    the search kept for it. Twin: the budget object bypassed, the same tune overruns."""
    machine, run = _greedy_tune(monkeypatch, tmp_path, _Bypassed if bypassed else TuneBudget)
    ended_s = machine.now + 10.0
    assert run.outcome.settings == Overlay({"cpu.threads": 1})  # the search kept something: the check ran
    assert machine.reserves and machine.check_granted
    if bypassed:
        assert ended_s > 120.0 * (1 + BUDGET_SLACK)
    else:
        assert ended_s <= 120.0 * (1 + BUDGET_SLACK)
        assert machine.check_granted[0] >= machine.reserves[-1] > 0
        assert run.end_to_end is not None and run.end_to_end.spent_s > 0  # it ran, in what it was granted


# -- acceptance: only the budget object compares the clock with an end ----------------------

_CLOCKS = {"monotonic", "perf_counter", "time", "clock", "_clock"}
_ENDS = ("deadline", "remaining", "time_left", "elapsed", "search_end", "left_s")


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _timed(node: ast.AST) -> bool:
    """``node`` reads the clock, or names an end or what is left before one."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _name(sub.func) in _CLOCKS:
            return True
        if isinstance(sub, (ast.Name, ast.Attribute)) and any(word in (_name(sub) or "").lower() for word in _ENDS):
            return True
    return False


def _clock_against_an_end(modules: dict[str, ast.AST]) -> list[str]:
    """``path:line`` of each comparison (``<``, ``>=``, ..., or a min/max, which is one) of the
    clock or a deadline-like name with something, outside tune/budget.py; ``is None`` is none."""
    found = []
    for path, tree in modules.items():
        if path.endswith("tune/budget.py"):
            continue
        for node in ast.walk(tree):
            compared = isinstance(node, ast.Compare) and not all(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops)
            clamped = isinstance(node, ast.Call) and _name(node.func) in ("min", "max")
            if (compared or clamped) and _timed(node):
                found.append(f"{path}:{node.lineno}")
    return sorted(set(found))


def _tune_modules() -> dict[str, ast.AST]:
    import torchboost

    root = Path(torchboost.__file__).parent
    return {p.relative_to(root.parent).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted((root / "tune").rglob("*.py"))}


def test_no_module_of_tune_but_the_budget_compares_the_clock_with_an_end():
    modules = _tune_modules()
    assert "torchboost/tune/budget.py" in modules and len(modules) > 20  # the scan has something to read
    assert _clock_against_an_end(modules) == []


@pytest.mark.parametrize("source", [
    "import time\ndef f(deadline):\n    return time.monotonic() > deadline\n",
    "import math\ndef f(self, limit_s):\n    return min(limit_s, self.deadline - self._clock())\n",
    "import math\ndef f(elapsed, budget_s):\n    return elapsed >= budget_s\n",
])
def test_twin_a_module_of_tune_that_compares_the_clock_with_an_end_is_found(source):
    modules = {"torchboost/tune/search/made_up.py": ast.parse(source),
               "torchboost/tune/budget.py": ast.parse("import time\ndef f(d):\n    return time.monotonic() > d\n"),
               "torchboost/tune/search/fine.py": ast.parse("def f(options):\n    return options.deadline_s is None\n")}
    assert _clock_against_an_end(modules) == ["torchboost/tune/search/made_up.py:3"]
