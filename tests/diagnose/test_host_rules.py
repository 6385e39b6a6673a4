"""host.checkpoint and host.output on hand-made Facts: a checkpoint every 5 steps, a print every step."""

from __future__ import annotations

import json

import pytest

from _diagnose_helpers import R, check_finding, checkpointed, printing, with_
from torchboost.diagnose import Facts, summarize
from torchboost.evidence.host_side import HostFacts


def test_a_checkpoint_every_five_steps_is_named_with_its_share_and_cadence():
    f = check_finding(R.host_checkpoint(checkpointed()), "host.checkpoint")
    assert f.title == "torch.save every 5 steps takes 24% of the step: save every 20 steps or in a background thread"
    assert f.evidence["every_steps"] == 5 and f.evidence["checkpoint_bytes"] == 4_000_000
    assert f.evidence["checkpoint_ms_per_step"] == pytest.approx(6.0) and f.evidence["ms_per_write"] == 30.0
    assert not f.fix and "every 20 steps" in f.advice and "threading.Thread" in f.advice_code
    assert f.expected_speedup == pytest.approx(25.1 / (25.1 - 4.5), rel=1e-3)  # 3/4 of the 6 ms go


def test_twin_a_checkpoint_under_the_threshold_is_not_a_finding():
    assert R.host_checkpoint(checkpointed(save_ms=5.0)) is None  # 1 ms a step, 5%
    assert R.host_checkpoint(checkpointed(), checkpoint_write_pct=30.0) is None
    assert R.host_checkpoint(checkpointed(every=0)) is None


def test_printing_every_step_is_named_with_calls_per_step():
    f = check_finding(R.host_output(printing()), "host.output")
    assert f.title == "Printing and logging take 10% of the step: print every 10 steps"
    assert f.evidence["output_calls_per_step"] == 3.0 and f.evidence["output_ms_per_step"] == pytest.approx(2.0)
    assert not f.fix and "step % 10 == 0" in f.advice_code


def test_twin_cheap_printing_is_not_a_finding():
    assert R.host_output(printing(output_ms=0.1)) is None
    assert R.host_output(printing(), output_pct=20.0) is None


def test_without_host_facts_the_share_alone_speaks():
    f = check_finding(R.host_checkpoint(with_(checkpointed(), host=None)), "host.checkpoint")
    assert f.title.startswith("torch.save takes 24% of the step: save every 100 steps")


def test_the_checkpoint_s_steps_are_typical_and_its_time_spread_over_all():
    s = summarize(checkpointed())
    assert s.steps_set_aside == 0  # a 49 ms step of its own saving is no outlier
    assert s.phase_ms["checkpoint"] == pytest.approx(6.0) and s.phase_ms["output"] == pytest.approx(0.1)
    assert sum(s.phase_ms.values()) == pytest.approx(s.step_time_ms["mean"])  # adds up to the mean step


def test_twin_judged_on_their_whole_time_the_saving_steps_are_set_aside(monkeypatch):
    monkeypatch.setattr("torchboost.evidence.steps.judged_ms", lambda step: step.total_ms)
    s = summarize(checkpointed())
    assert s.steps_set_aside == 4 and s.phase_ms["checkpoint"] == 0.0
    assert sum(s.phase_ms.values()) < 0.8 * s.step_time_ms["mean"]


def test_host_facts_cadence_bytes_and_json_round_trip():
    host = HostFacts(checkpoint_steps=[5, 5, 10, 15], checkpoint_ms=[3.0, 1.0, 3.0, 3.0],
                     checkpoint_bytes=[100, 20, 100, 100], output_calls=7)
    assert host.checkpoint_every() == 5 and host.writes_per_checkpoint() == pytest.approx(4 / 3)
    assert host.checkpoint_bytes_median() == 100  # steps 5 (120), 10 and 15 (100)
    assert HostFacts(checkpoint_steps=[3], checkpoint_ms=[1.0], checkpoint_bytes=[None]).checkpoint_every() is None
    assert HostFacts(checkpoint_steps=[3], checkpoint_ms=[1.0], checkpoint_bytes=[None]).checkpoint_bytes_median() is None
    facts = checkpointed()
    back = Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert back.host == facts.host and back.steps == facts.steps
