"""A NaN or inf loss is the first finding, above every speedup; reports stay strict JSON."""

from __future__ import annotations

import json
import math

import pytest

from _diagnose_helpers import make_facts, with_
from torchboost.diagnose import diagnose
from torchboost.report.doctor_report import build_report

DATA_BOUND = dict(data=60.0, forward=20.0, backward=15.0, optimizer=3.0, other=2.0)


def _strict(value: str) -> float:
    raise ValueError(f"not strict JSON: {value}")


def test_a_loss_nan_from_step_0_is_the_first_finding_above_a_large_speedup():
    facts = with_(make_facts(**DATA_BOUND), loader={"num_workers": 0})
    facts.warmup_losses = [math.nan] * 5
    facts.losses = [math.nan] * 20
    findings = diagnose(facts)
    assert [f.id for f in findings][:2] == ["loss.nonfinite", "data.workers"]
    first = findings[0]
    assert first.blocking and first.title == "The loss is NaN from its first step: fix that before tuning"
    assert findings[1].expected_speedup > 2.0  # ranked below the NaN however large


def test_a_loss_that_turns_inf_later_is_named_by_the_scripts_own_step_count():
    facts = make_facts()
    facts.warmup_losses = [2.0] * 5
    facts.losses = [1.9] * 24 + [math.inf] + [1.8] * 3
    finding = next(f for f in diagnose(facts) if f.id == "loss.nonfinite")
    assert finding.title.startswith("The loss is inf from step 29 (its 30th step)")
    assert finding.evidence["first_nonfinite_step"] == 29 and finding.evidence["nonfinite_steps"] == 1


@pytest.mark.parametrize("recorded, expected", [(True, 30), (False, 27)])
def test_the_step_is_the_scripts_though_the_profiled_steps_have_no_loss(recorded, expected):
    # A --full run: steps 25-27 were profiled and have no loss; the NaN is at the script's step 30.
    facts = make_facts()
    facts.warmup_losses = [2.0] * 5
    facts.losses = [1.9] * 22 + [math.nan] * 2
    facts.loss_steps = [*range(25), 28, 29, 30, 31] if recorded else []  # twin: the steps not recorded
    finding = next(f for f in diagnose(facts) if f.id == "loss.nonfinite")
    assert finding.evidence["first_nonfinite_step"] == expected
    assert finding.title.startswith(f"The loss is NaN from step {expected} ")


def test_twin_a_finite_loss_makes_no_such_finding():
    facts = make_facts()
    facts.losses = [2.0 - 0.01 * i for i in range(20)]
    assert all(f.id != "loss.nonfinite" for f in diagnose(facts))


def test_the_report_of_a_nan_run_parses_as_strict_json():
    facts = make_facts()
    facts.losses = [math.nan] * 20
    report = build_report(facts, diagnose(facts))
    text = json.dumps(report, allow_nan=False)
    data = json.loads(text, parse_constant=_strict)
    assert data["findings"][0]["id"] == "loss.nonfinite" and data["findings"][0]["blocking"] is True
    assert data["facts"]["losses"] == [None] * 20  # NaN written as null


def test_twin_the_strict_parser_rejects_a_bare_nan():
    with pytest.raises(ValueError, match="not strict JSON"):
        json.loads('{"loss": NaN}', parse_constant=_strict)
