"""What tune tells its levers of the run: the doctor's step, the planned run, the search's budget."""

from __future__ import annotations

from torchboost.config import Overlay
from torchboost.diagnose import Facts, StepRecord
from torchboost.tune import tuner
from torchboost.tune.search import TuneOutcome
from torchboost.tune.trials.trial_result import TrialResult


def _facts() -> Facts:
    return Facts(env={"device": "cuda", "cpu_cores": 8}, steps=[StepRecord(i, 40.0 + 20.0 * (i % 2)) for i in range(4)],
                 planned_steps=5_000, planned_from="the script's --max-steps=5000")


def test_the_context_carries_the_doctor_s_step_and_planned_run():
    context = tuner.context_from_facts(_facts())
    assert context.step_ms == 50.0 and context.planned_steps == 5_000
    assert tuner.context_from_facts(Facts()).step_ms is None  # no step seen: not known


def test_the_search_s_levers_see_its_budget_and_the_run_given_with_run_steps(tmp_path, monkeypatch):
    seen = []

    def search(levers, context, measure, options, **kwargs):
        seen.append((context, options))
        failed = TrialResult(settings=Overlay(), ok=False, error="stop here")
        return TuneOutcome(failed, Overlay(), [], [], 0, 0.0, error="stop here")

    monkeypatch.setattr(tuner, "run_search", search)
    (tmp_path / "train.py").write_text("")
    options = tuner.TuneOptions(out_dir=tmp_path / "out", config_path=tmp_path / "torchboost.toml", budget_s=300.0,
                                run_steps=20_000, steps_per_trial=10)
    tuner.tune_script(["python", str(tmp_path / "train.py")], options, facts=_facts(), spent_s=40.0)
    (context, search_options), = seen
    assert context.planned_steps == 20_000  # --run-steps wins over the doctor's estimate
    assert context.budget_s == search_options.budget_s and 250.0 < context.budget_s <= 260.0  # less the diagnosis
