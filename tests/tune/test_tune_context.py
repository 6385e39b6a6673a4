"""What tune tells its levers of the run: the doctor's step, the planned run, the search's budget."""

from __future__ import annotations

import dataclasses

import pytest

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


def _technique_fields(context: type) -> set[str]:
    """The fields of ``context`` that some technique's own tuning facts hold."""
    from torchboost.techniques.registry import techniques

    own = {f.name for t in techniques() if t.tune_context is not None
           for f in dataclasses.fields(type(t.tune_context(Facts())))}
    return {f.name for f in dataclasses.fields(context)} & own


def test_the_context_names_no_technique_each_technique_owns_its_tuning_facts():
    """Each technique's hook gives one frozen object of its own kind, which its levers read
    with ``own`` (defaults where none was given); no field of TuneContext is one of them."""
    from torchboost.techniques.loader import LoaderTuning
    from torchboost.techniques.memory import MemoryTuning
    from torchboost.techniques.registry import techniques
    from torchboost.tune.search.levers import TuneContext

    assert _technique_fields(TuneContext) == set()
    context = tuner.context_from_facts(_facts())
    kinds = [type(facts) for facts in context.tuning]
    assert len(kinds) == len(set(kinds)) == sum(t.tune_context is not None for t in techniques()) >= 4
    assert all(dataclasses.is_dataclass(k) and k.__dataclass_params__.frozen for k in kinds)
    assert context.own(MemoryTuning) is next(f for f in context.tuning if isinstance(f, MemoryTuning))
    assert TuneContext().own(LoaderTuning) == LoaderTuning()
    moved = context.with_own(MemoryTuning(has_conv2d=False))
    assert moved.own(MemoryTuning).has_conv2d is False and len(moved.tuning) == len(context.tuning)


def test_twin_a_context_field_of_a_technique_or_its_facts_given_twice_is_found():
    from torchboost.techniques.memory import MemoryTuning
    from torchboost.tune.search.levers import TuneContext

    @dataclasses.dataclass(frozen=True)
    class GrownContext:
        device: str = "cpu"
        has_conv2d: bool = True

    assert _technique_fields(GrownContext) == {"has_conv2d"}
    with pytest.raises(ValueError, match="MemoryTuning"):
        TuneContext(tuning=(MemoryTuning(), MemoryTuning(has_conv2d=False)))


def test_a_probe_whose_pairs_disagree_leaves_its_lever_ordered_by_its_estimate(tmp_path, monkeypatch):
    """Beside a busy loop the doctor's bf16 probe gave pairs from x0.6 to x1.02 (the report
    ranks the finding at most x1.02): the search still orders bf16 by its estimate, x1.20,
    before the fused optimizer's x1.05. Twin: ordered by the report's rank, it came after."""
    from torchboost.evidence.findings import Finding, Measured
    from torchboost.tune.search.levers import default_levers, order_levers

    def finding(fid, estimate, measured=None):
        return Finding(id=fid, title=fid, evidence={}, expected_speedup=estimate, formula="f", measured=measured)

    seen = []

    def search(levers, context, measure, options, **kwargs):
        seen.append([lv.id for lv in levers])
        failed = TrialResult(settings=Overlay(), ok=False, error="stop here")
        return TuneOutcome(failed, Overlay(), [], [], 0, 0.0, error="stop here")

    findings = [finding("precision.lower", 1.2, Measured(0.9, 6, "bf16 autocast", 0.6, 1.02)),
                finding("optimizer.fused", 1.05)]
    monkeypatch.setattr(tuner, "run_search", search)
    monkeypatch.setattr(tuner, "diagnose", lambda facts: findings)
    (tmp_path / "train.py").write_text("")
    options = tuner.TuneOptions(out_dir=tmp_path / "out", config_path=tmp_path / "torchboost.toml", budget_s=300.0,
                                steps_per_trial=10)
    tuner.tune_script(["python", str(tmp_path / "train.py")], options, facts=_facts())
    order = seen[0]
    assert order.index("precision") < order.index("optimizer")
    by_rank = [lv.id for lv in order_levers(default_levers(), {f.id: f.rank_speedup for f in findings})]
    assert by_rank.index("optimizer") < by_rank.index("precision")
