"""Short alternating bursts: on a busy machine, a switchable candidate is timed inside one run."""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics

import pytest

from slow_script import SlowScript
from test_search import CPU2

from torchboost.config import Overlay
from torchboost.evidence.findings import Measured
from torchboost.evidence.quick_probe import QuickProbeFacts, bursts_decided
from torchboost.plan import Bursts
from torchboost.report._tune_text import verdict as summary_line
from torchboost.tune.search.bursts import (FASTER, MAX_BURST_RUNS, NO_GAIN, SLOWER, burst_decision, burst_verdict,
                                           more_bursts, plan_bursts)
from torchboost.tune.search.decision import Status
from torchboost.techniques.precision import PrecisionTuning
from torchboost.tune.search.levers import default_levers, order_levers
from torchboost.tune.search import SearchOptions, run_search
from torchboost.tune.trials.trial_result import TrialResult

MEASURED = {"precision.lower": Measured(1.33, 6, "bf16 autocast")}


class BusyScript(SlowScript):
    """Trials minutes apart see loads ``noise`` apart; a burst trial's pairs, seconds apart,
    share their load, and differ by ``jitter`` only."""

    def __init__(self, *args, jitter=0.02, load_pct=60.0, **kwargs):
        super().__init__(*args, load_pct=load_pct, **kwargs)
        self.burst_trials: list[Bursts] = []
        self._load = itertools.cycle([1.0, 1.6, 0.8, 1.3, 1.1, 0.7])
        self._jitter = itertools.cycle([1.0, 1.0 + jitter, 1.0 - jitter])

    def _quiet_ms(self, settings):
        return self.step_ms * math.prod(self.factors.get(item, 1.0) for item in settings.items())

    def measure(self, settings, repeat, decide=None, bursts=None, **_):
        if bursts is None:
            return super().measure(settings, repeat, decide)
        self.burst_trials.append(bursts)
        plain, switched = [], []
        plain_ms, switched_ms = self._quiet_ms(settings), self._quiet_ms({**settings, **bursts.change})
        for _ in range(bursts.pairs):
            load = next(self._load)
            plain.append(plain_ms * load * next(self._jitter))
            switched.append(switched_ms * load * next(self._jitter))
        self.now += self.fixed_s + (self.warmup * self.step_ms + sum(plain) + sum(switched)) / 1e3
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[self.step_ms] * 2, samples_per_step=16,
                           load_pct=self.load_pct, bursts=dict(bursts.change), burst_plain_ms=plain, burst_switched_ms=switched)


def _search(script, measure, bursts=True):
    context = dataclasses.replace(CPU2, measured=MEASURED, has_loader=False)
    levers = [lv for lv in order_levers(default_levers(), {}, MEASURED) if lv.id == "precision"]
    return run_search(levers, context, measure, SearchOptions(budget_s=2000, bursts=bursts), clock=script.clock)


@pytest.mark.parametrize("takes_bursts", [True, False])
def test_a_busy_machine_measures_the_top_candidate_in_bursts(takes_bursts):
    """Runs apart vary by 40%, more than bf16's 25%: pairs of runs cannot tell, bursts can.
    Twin: a measure that cannot run bursts says too busy to tell."""
    script = BusyScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.75}, noise=0.4)
    outcome = _search(script, script.measure if takes_bursts else script, bursts=takes_bursts)
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    busy = [w for w in outcome.warnings if w.startswith("too busy to tell")]
    if takes_bursts:
        assert decision.status == "kept" and "alternating bursts in one run" in decision.reason
        assert decision.ratio == pytest.approx(0.75, rel=0.05)
        assert outcome.settings.get("precision.mode") == "bf16" and not busy
        assert script.burst_trials[0].change == {"precision.mode": "bf16"}
    else:
        assert decision.status != "kept" and busy


@pytest.mark.parametrize("takes_bursts", [True, False])
def test_a_switchable_candidate_is_confirmed_in_one_burst_trial(takes_bursts):
    """On a quiet machine too, an in-process switch is confirmed by alternating it inside one
    run: its screening run and one burst trial, not pairs of runs. Twin: a measure that
    cannot run bursts confirms it in pairs (more runs of the candidate)."""
    script = BusyScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.75}, noise=0.01)
    outcome = _search(script, script.measure if takes_bursts else script, bursts=takes_bursts)
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    candidate_runs = sum("precision.mode" in settings for settings, _, _ in script.calls)
    assert outcome.settings.get("precision.mode") == "bf16" and decision.status == "kept"
    if takes_bursts:
        assert len(script.burst_trials) == 1 and "alternating bursts in one run" in decision.reason
        assert candidate_runs == 1  # its screening: the bursts ran on the incumbent's run
    else:
        assert not script.burst_trials and "pair(s)" in decision.reason and candidate_runs >= 2


def test_bursts_that_cannot_tell_either_say_so():
    """Bursts as noisy as the runs (a load that changes within seconds): undecided, said in
    the decision's reason and in the too-busy warning's place."""
    script = BusyScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.9}, noise=0.4, jitter=0.4)
    outcome = _search(script, script.measure)
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    assert script.burst_trials and decision.status != "kept"
    assert "alternating bursts in one run" in decision.reason and "not decided either way" in decision.reason
    assert any(w.startswith("too busy to tell") for w in outcome.warnings)


class ShakyBursts(BusyScript):
    """Bursts whose pairs' ratios scatter evenly over ±``spread`` of the true ratio, every
    pair on its faster side of 1 (pairs the other way round decide nothing, pooled or not):
    one run's pairs leave a real gain undecided, a few runs' pairs pooled do not."""

    def __init__(self, *args, spread=0.1, **kwargs):
        super().__init__(*args, jitter=0.0, **kwargs)
        self._spread = spread

    def measure(self, settings, repeat, decide=None, bursts=None, **_):
        result = super().measure(settings, repeat, decide, bursts)
        if bursts is not None:
            n = len(result.burst_switched_ms)
            result.burst_switched_ms = [s * (1.0 + self._spread * (2 * i / (n - 1) - 1))
                                        for i, s in enumerate(result.burst_switched_ms)]
        return result


@pytest.mark.parametrize("pooled", [True, False])
def test_bursts_run_again_while_the_noise_hides_a_gain(pooled, monkeypatch):
    """bf16 at 0.9 with pairs scattering ±10% (0.81 to 0.99): one run's 15 pairs cannot tell,
    more runs pooled keep it. Twin: one run only (no pooling) leaves it too busy to tell."""
    if not pooled:
        monkeypatch.setattr("torchboost.tune.search.bursts.MAX_BURST_RUNS", 1)
    script = ShakyBursts(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.9}, noise=0.4, spread=0.1)
    outcome = _search(script, script.measure)
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    if pooled:
        assert 2 <= len(script.burst_trials) <= MAX_BURST_RUNS
        assert decision.status == "kept" and f"in {len(script.burst_trials)} runs" in decision.reason
        assert len(decision.ratios) == 15 * len(script.burst_trials)
        assert decision.ratio == pytest.approx(0.9, rel=0.1)
    else:
        assert len(script.burst_trials) == 1 and decision.status != "kept"
        assert "not decided either way" in decision.reason


def test_more_bursts_only_while_undecided_on_the_faster_side():
    hidden = [0.85 * (1.15 if i % 2 else 0.87) for i in range(10)]  # median 0.85, wide
    assert burst_verdict(hidden, 0.03)[0] is None and more_bursts(hidden, 0.03, runs=1)
    assert not more_bursts(hidden, 0.03, runs=MAX_BURST_RUNS)  # runs spent
    assert not more_bursts([r / 0.85 for r in hidden], 0.03, runs=1)  # about 1: at best no gain
    assert not more_bursts([0.70, 0.72, 0.69, 0.71, 0.70, 0.73], 0.03, runs=1)  # decided
    assert not more_bursts(hidden + [1.5], 0.03, runs=1)  # a pair the other way round: pooled, still would be


@pytest.mark.parametrize("ratios, verdict", [
    ([0.70, 0.72, 0.69, 0.71, 0.70, 0.73], FASTER),
    ([1.20, 1.22, 1.19, 1.21, 1.20, 1.23], SLOWER),
    ([0.99, 1.00, 1.01, 0.99, 1.00, 1.01], NO_GAIN),  # about 1, both sides of it: what no gain looks like
    ([0.60, 1.30, 0.80, 1.10, 0.70, 1.20], None),  # twin of FASTER: as wide as the gain
    ([1.20, 1.22, 0.01, 1.21, 1.20, 1.23], None),  # twin of SLOWER: a pair the other way round
    ([0.70, 0.72], None),  # too few pairs to say
])
def test_the_burst_verdict_rests_on_the_pairs_own_spread(ratios, verdict):
    assert burst_verdict(ratios, min_gain=0.03)[0] == verdict


REVERSED = [0.007, 0.02, 100.7, 0.035]
"""A user's bf16 bursts, candidate over incumbent: one pair of four 100x the other way round
(kept as 36x, "± 0.039", by the spread of the other three)."""
CONSISTENT = [0.007, 0.02, 0.05, 0.035]
"""The twin: the same pairs, every one faster."""


@pytest.mark.parametrize("ratios, decided", [(REVERSED, False), (CONSISTENT, True)])
def test_bursts_whose_pairs_disagree_decide_nothing_by_the_doctors_own_rule(ratios, decided):
    """Pairs that disagree decide nothing: not kept, not slower, and the words say the pairs
    disagreed, with no ± the other pairs' spread would give; the burst trial does not end
    its bursts on them. The rule is the doctor's: its quick probe of the same pairs (plain
    over switched) agrees exactly when tune's bursts do. Twin: every pair faster is kept."""
    status, said, ratio = burst_decision(ratios, 0.03, None)
    doctor = Measured.of(QuickProbeFacts("precision.lower", "bf16 autocast", plain_ms=[1.0] * 4, switched_ms=ratios))
    assert doctor.agree is decided and bursts_decided(ratios, min_gain=0.03) is decided
    assert ratio == pytest.approx(statistics.median(ratios))
    if decided:
        assert status is Status.KEPT and "±" in said
    else:
        assert status is None and "±" not in said
        assert "its pairs from 0.007 to 100.700: pairs disagreed" in said


class FixedBursts(BusyScript):
    """Burst trials whose pairs' ratios are ``ratios``, each pair at the incumbent's pace."""

    def __init__(self, *args, ratios, **kwargs):
        super().__init__(*args, **kwargs)
        self._ratios = ratios

    def measure(self, settings, repeat, decide=None, bursts=None, **_):
        result = super().measure(settings, repeat, decide, bursts)
        if bursts is not None:
            result.burst_plain_ms = [self.step_ms] * len(self._ratios)
            result.burst_switched_ms = [self.step_ms * r for r in self._ratios]
        return result


@pytest.mark.parametrize("ratios, kept", [(REVERSED, False), (CONSISTENT, True)])
def test_a_search_keeps_no_switch_whose_bursts_disagree(ratios, kept):
    """The search on bursts of a 100x reversal: bf16 is neither kept nor called slower, its
    decision and the summary's line say its pairs disagreed, and no more bursts are pooled
    onto them. Twin: the consistent pairs keep it."""
    script = FixedBursts(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.5}, noise=0.01, ratios=ratios)
    outcome = _search(script, script.measure)
    decision = next(d for d in outcome.decisions if d.lever == "precision" and d.in_bursts)
    line = summary_line({"subject": "bf16", "status": str(decision.status), "ratio": decision.ratio,
                         "reason": decision.reason})
    assert (outcome.settings.get("precision.mode") == "bf16") is kept
    if kept:
        assert decision.status == "kept" and line == "bf16 was 36.36x faster here: kept"
    else:
        assert decision.status not in ("kept", "slower") and len(script.burst_trials) == 1
        assert "pairs disagreed" in decision.reason and "±" not in decision.reason
        assert line == "bf16: its alternating bursts disagreed (some pairs faster, some slower): not decided, not kept"


def test_bursts_group_fast_steps_and_fill_a_trial():
    assert plan_bursts({"precision.mode": "bf16"}, 1000.0, 30) == Bursts({"precision.mode": "bf16"}, 1, 15)
    fast = plan_bursts({"precision.mode": "bf16"}, 5.0, 300)  # 5 ms steps: bursts of 10 steps (50 ms)
    assert (fast.steps, fast.pairs) == (10, 15)
    assert plan_bursts({}, math.inf, 30).steps == 1 and plan_bursts({}, 1000.0, 4).pairs == 6


@pytest.mark.slow
@pytest.mark.parametrize("change, ratios", [({"precision.mode": "bf16"}, True), ({"cpu.threads": 1}, True),
                                            ({"optimizer.implementation": "foreach"}, False)])
def test_a_burst_trial_of_the_real_script_gives_its_pairs(tmp_path, change, ratios):
    """The whole path: tune's trial asks for bursts, the script's process alternates bf16
    autocast, the result carries each pair. Twin: a change no switch makes gives no ratio."""
    from pathlib import Path

    from torchboost.plan import Plan
    from torchboost.tune.trials.trial import TrialRequest, run_trial

    script = Path(__file__).resolve().parents[1] / "scripts" / "tune_tiny.py"
    result = run_trial(TrialRequest(command=["python", str(script), "--steps", "200"], settings=Overlay(), repeat=0,
                                    plan=Plan.tuned(Overlay(), bursts=Bursts(change, steps=2, pairs=4)), steps=2,
                                    warmup=1, out_dir=tmp_path, timeout_s=120))
    assert result.ok, result.error
    assert result.bursts == change
    if ratios:
        assert result.burst_error is None and len(result.burst_ratios) == 8
        assert all(r > 0 for r in result.burst_ratios)
    else:
        assert "no switch makes optimizer.implementation=foreach" in result.burst_error and result.burst_ratios == []


def test_the_journal_keeps_a_burst_trial_apart_from_the_incumbents_own_run(tmp_path):
    """--resume replays a burst trial as a burst trial: its key has its change. Twin: the
    incumbent's ordinary run of the same repeat is its own entry."""
    from torchboost.tune.trials.journal import Journal

    journal = Journal(tmp_path / "journal.jsonl")
    journal.append(TrialResult(settings={}, repeat=0, step_ms=[10.0]))
    journal.append(TrialResult(settings={}, repeat=0, step_ms=[10.0], bursts={"precision.mode": "bf16"},
                               burst_plain_ms=[10.0], burst_switched_ms=[7.0]))
    again = Journal(tmp_path / "journal.jsonl", resume=True)
    assert again.lookup({}, 0).burst_ratios == []
    assert again.lookup({}, 0, {"precision.mode": "bf16"}).burst_ratios == [0.7]
    assert again.lookup({}, 0, {"fp32_math.mode": "bf16"}) is None


def test_a_second_switchable_lever_on_the_same_busy_machine_is_measured_too():
    """The floor is known to be wide before the second lever: it still gets a fresh pair (then
    bursts, if the pair cannot tell), and the search goes on. Twin of stopping it unconfirmed,
    as if the budget had run out, which going to bursts before any pair did."""
    measured = {**MEASURED, "fp32_math.bf16": Measured(1.25, 6, "bf16 math in fp32 matmuls")}
    script = BusyScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.75,
                                                 ("fp32_math.mode", "bf16"): 0.85}, noise=0.4)
    context = dataclasses.replace(CPU2, measured=measured, has_loader=False).with_own(PrecisionTuning(cpu_bf16=True))
    levers = [lv for lv in order_levers(default_levers(), {}, measured) if lv.id in ("precision", "fp32_math")]
    outcome = run_search(levers, context, script.measure, SearchOptions(budget_s=4000, bursts=True), clock=script.clock)
    by_lever = {d.lever: d for d in outcome.decisions}
    assert by_lever["precision"].status == "kept"
    assert by_lever["fp32_math"].status != "unconfirmed" and not outcome.stopped_by_budget
    assert sum("fp32_math.mode" in settings for settings, _, _ in script.calls) >= 1  # screened, then bursts
    assert any(b.change == {"fp32_math.mode": "bf16"} for b in script.burst_trials)


def _busy_four_second_search():
    """A 4 s-step script beside a busy loop (runs apart vary by 40%): one thread 0.26 of the
    step, bf16 0.8, bf16 math and the fused optimizer about 1, compile 0.9."""
    factors = {("cpu.threads", 1): 0.26, ("precision.mode", "bf16"): 0.8, ("optimizer.implementation", "fused"): 0.99,
               ("fp32_math.mode", "bf16"): 0.99, ("compile.mode", "default"): 0.9}
    script = BusyScript(step_ms=4000.0, factors=factors, noise=0.4, warmup=2, fixed_s=6.0, steps=12)
    measured = {"threads.contended": Measured(3.86, 6, "1 thread", 3.5, 4.0)}
    context = dataclasses.replace(CPU2, measured=measured, has_loader=False, planned_steps=2000).with_own(
        PrecisionTuning(cpu_bf16=True))
    estimates = {"threads.contended": 2.0, "compile.enable": 1.3, "precision.lower": 1.25, "fp32_math.bf16": 1.1,
                 "optimizer.fused": 1.3}
    levers = order_levers(default_levers(), estimates, measured)
    options = SearchOptions(budget_s=400, trial_steps=12, run_steps=2000, bursts=True)
    outcome = run_search(levers, context, script.measure, options, clock=script.clock)
    return script, outcome


def test_a_busy_slow_script_decides_its_switches_in_bursts_before_any_run_per_candidate():
    """Threads, bf16, bf16 math and the fused optimizer are each decided in one burst trial,
    before compile's first trial and before foreach, the optimizer's candidate that is no
    switch (its lever, x1.3 estimated, ordered before bf16's x1.25: in one pass per lever,
    foreach's run came before bf16 was tried, and beside a busy loop the budget ended
    there); the two that gain nothing cost no run of their own, the two kept one run each
    (their losses judged)."""
    script, outcome = _busy_four_second_search()
    compile_at, bf16_at = script.first_call("compile.mode"), script.first_call("precision.mode")
    decided = {d.lever: d for d in outcome.decisions if d.lever in ("host", "precision", "fp32_math", "optimizer")
               and d.in_bursts}
    assert set(decided) == {"host", "precision", "fp32_math", "optimizer"}
    assert decided["host"].status == decided["precision"].status == "kept"
    assert {decided["fp32_math"].status, decided["optimizer"].status} <= {"not_beyond_noise", "slower"}
    assert {frozenset(b.change) for b in script.burst_trials} == {
        frozenset({"cpu.threads"}), frozenset({"precision.mode"}), frozenset({"fp32_math.mode"}),
        frozenset({"optimizer.implementation"})}
    assert script.first_call("fp32_math.mode") is None
    assert not any(s.get("optimizer.implementation") == "fused" for s, _, _ in script.calls)
    foreach_at = next((t for s, _, t in script.calls if s.get("optimizer.implementation") == "foreach"), None)
    last_burst_decision = max(i for i, d in enumerate(outcome.decisions) if d.in_bursts)
    assert all(not d.in_bursts for d in outcome.decisions[last_burst_decision + 1:])
    assert bf16_at is not None and (compile_at is None or bf16_at < compile_at)
    assert foreach_at is None or bf16_at < foreach_at


def test_a_switch_faster_in_bursts_is_not_kept_unjudged_when_the_budget_ends():
    """bf16 decided faster in bursts at 89 s, its own run about 36 s at the pace they
    measured: past --budget (85 s), it still runs where the search's end (the deadline less
    the check's time) holds it, and is kept; where it does not (an end at 100 s), it is
    unconfirmed, its losses never judged, nothing kept."""
    for deadline_s, kept in ((100.0, False), (3000.0, True)):  # the baseline and the bursts take 89 s
        script = BusyScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.75}, noise=0.01)
        context = dataclasses.replace(CPU2, measured=MEASURED, has_loader=False)
        levers = [lv for lv in order_levers(default_levers(), {}, MEASURED) if lv.id == "precision"]
        options = SearchOptions(budget_s=85.0, deadline_s=deadline_s, bursts=True)
        outcome = run_search(levers, context, script.measure, options, clock=script.clock)
        decision = next(d for d in outcome.decisions if d.lever == "precision")
        assert (outcome.settings.get("precision.mode") == "bf16") is kept
        assert decision.status == ("kept" if kept else "unconfirmed") and decision.in_bursts
        assert (script.first_call("precision.mode") is not None) is kept
        if not kept:  # what was measured is said, not "nothing was measured"
            from torchboost.tune.verify.end_to_end import nothing_kept
            assert nothing_kept(outcome).startswith("nothing kept: precision.mode=bf16 measured 1.31x a step")


def test_a_faster_switch_s_own_run_is_gated_by_its_measured_pace_not_the_typical_trial():
    """Beside a busy loop a baseline trial of 5 s steps takes 100 s; one thread measured at
    0.3 of it in bursts: its own run takes about 30 s, and it fits the 60 s left where a
    typical trial (the baseline's) would not. Twin: the typical trial's length gates it."""
    from torchboost.tune.budget import TuneBudget
    from torchboost.tune.search.pairs import Runner

    now = [0.0]

    def measure(settings, repeat, bursts=None, **_):
        now[0] += 60.0 if bursts else 100.0
        return TrialResult(settings=dict(settings))

    budget = TuneBudget(1000.0, whole_s=300.0, clock=lambda: now[0])
    budget.keep_for_check(80.0)
    runner = Runner(measure, budget)
    runner({})
    runner({}, bursts=Bursts(change={"cpu.threads": 1}))
    assert now[0] == 160.0
    assert budget.affords_trial(6.0 + 17 * 1.5) and not budget.affords_trial()
