"""--budget bounds the whole tune: the end-to-end check gets what is left, or is skipped and said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchboost.config import BoostConfig, Overlay
from torchboost.tune import tuner
from torchboost.tune.decision import TuneOutcome
from torchboost.tune.trial_result import TrialResult
from torchboost.tune.verify import EndToEnd


def _outcome() -> TuneOutcome:
    baseline = TrialResult(settings=Overlay(), step_ms=[10.0] * 5, wall_s=10.0)
    from torchboost.tune.decision import WaterfallStep
    return TuneOutcome(baseline=baseline, settings=Overlay({"cpu.threads": 1}),
                       waterfall=[WaterfallStep("baseline", Overlay(), 10.0, 1.0, 0.0)], decisions=[], trials_run=3,
                       elapsed_s=50.0)


@pytest.mark.parametrize("time_left_s, checked", [(15.0, False), (100.0, True)])
def test_the_check_takes_what_the_budget_leaves_or_is_skipped_and_said(monkeypatch, tmp_path, time_left_s, checked):
    seen = {}

    def fake_verify(command, base, settings, plan, **kwargs):
        seen["budget_s"] = plan.budget_s
        return EndToEnd(baseline_runs_s=[10.0] * 3, tuned_runs_s=[8.0] * 3)

    monkeypatch.setattr(tuner, "verify", fake_verify)
    options = tuner.TuneOptions(out_dir=Path(tmp_path), config_path=Path(tmp_path) / "t.toml", budget_s=300.0)
    settings, e2e, verdict = tuner._verify(["python", "x.py"], options, BoostConfig.off(), _outcome(), None, None,
                                           {}, time_left_s=time_left_s)
    assert settings == Overlay({"cpu.threads": 1})
    if checked:  # twin: time enough, the check runs within it (not the configured 150 s)
        assert seen["budget_s"] == 100.0 and e2e is not None and verdict.startswith("verified end to end")
    else:
        assert not seen and e2e is None
        assert verdict.startswith("not verified end to end: --budget left 15 s")
