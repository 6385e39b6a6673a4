"""A trial's plan: the search's settings on the user's configuration, resolved once where
the tuner asks for the trial, and handed to the trial's process whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchboost import handover
from torchboost.config import BoostConfig, Overlay
from torchboost.plan import Plan
from torchboost.techniques.loader import LoaderConfig
from torchboost.techniques.precision import PrecisionConfig
from torchboost.tune import tuner
from torchboost.tune.trials.journal import Journal
from torchboost.tune.trials.trial_result import TrialResult

USERS = BoostConfig.off().replace(loader={"num_workers": 2})
BF16 = Overlay.of(PrecisionConfig, mode="bf16")


def _asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: BoostConfig, settings: Overlay):
    """The trial the tuner's measure asks for, not run."""
    asked = []

    def record(request):
        asked.append(request)
        return TrialResult(settings=request.settings, repeat=request.repeat, step_ms=[10.0])

    monkeypatch.setattr(tuner, "run_trial", record)
    options = tuner.TuneOptions(out_dir=tmp_path, config_path=tmp_path / "torchboost.toml", budget_s=60.0,
                                steps_per_trial=4)
    measure = tuner._journaled_measure(Journal(tmp_path / "j.jsonl"), ["python", "x.py"], options, base, None)
    measure(settings, 0)
    (request,) = asked
    return request


@pytest.mark.parametrize("base, applied", [
    (USERS, {"loader.num_workers": 2, "precision.mode": "bf16"}),
    (BoostConfig.off(), {"precision.mode": "bf16"}),  # twin: no setting of the user's to keep
])
def test_a_trial_applies_the_candidate_on_top_of_the_users_own_settings(tmp_path, monkeypatch, base, applied):
    request = _asked(tmp_path, monkeypatch, base, BF16)
    assert request.settings == BF16  # the trial's label is the search's settings alone
    plan = request.run_request().apply
    assert plan is request.plan  # handed on whole, not resolved again
    assert dict(plan.apply) == applied
    assert plan.config.section(LoaderConfig).num_workers == base.section(LoaderConfig).num_workers
    assert plan.config == Plan.tuned(BF16, base).config


def test_the_trials_process_reads_the_plan_its_parent_resolved(tmp_path, monkeypatch):
    plan = _asked(tmp_path, monkeypatch, USERS, BF16).plan
    path = tmp_path / "plan.json"
    handover.write_plan(path, plan)
    monkeypatch.setenv(handover.TRIAL_SETTINGS_ENV, str(path))
    monkeypatch.setattr(handover, "_READ", {})
    assert handover.trial_plan() == plan
    other = Plan.tuned(Overlay.of(PrecisionConfig, mode="fp16"), USERS)  # twin: another candidate's plan differs
    assert handover.trial_plan() != other
