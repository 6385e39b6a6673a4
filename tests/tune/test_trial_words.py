"""A trial's failure in words: a script that ended within its warm-up is said as the doctor says it,
and one that trained, then ended, is said to have trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchboost.evidence.observed import Facts, StepRecord
from torchboost.observe.parent.supervise import ObservedRun
from torchboost.tune import tuner
from torchboost.tune.trials.trial import result_from_facts


@pytest.mark.parametrize("ended, code, words", [
    ("finished", 0, "the script ended after 3 training steps, all within the 5 warm-up steps"),
    ("crashed", 1, "the script ran 3 training steps, then exited with code 1"),  # twin: a crash in warm-up is a crash
])
def test_a_script_that_ended_in_its_warm_up_is_counted_as_the_doctor_counts_it(ended, code, words):
    facts = Facts(steps=[], steps_seen=3, warmup_steps=5, ended=ended, warmup_step_ms=[9.0, 1.0, 1.0])
    result = result_from_facts(facts, {}, 0, exit_code=code)
    assert not result.ok and result.error.startswith(words)


def _ended_itself(steps_seen: int, recorded: int) -> Facts:
    """The facts of a script that ran ``steps_seen`` steps (``recorded`` of them recorded),
    then called ``os._exit(3)``."""
    steps = [StepRecord(index=i, total_ms=1.0) for i in range(recorded)]
    return Facts(steps=steps, steps_seen=steps_seen, warmup_steps=5, ended="exited", exit_code=3)


@pytest.mark.parametrize("steps_seen, recorded, words", [
    (30, 20, "the baseline run failed: the script ran 30 training steps, then exited with code 3"),
    (0, 0, "the baseline run failed: no training step completed (exit code 3)"),  # twin: it never trained
])
def test_a_baseline_that_trained_then_ended_itself_is_said_to_have_trained(tmp_path, monkeypatch, steps_seen,
                                                                            recorded, words):
    facts = _ended_itself(steps_seen, recorded)
    observed = ObservedRun(facts=facts, exit_code=3, stderr_tail="", out_dir=Path(tmp_path), steps_seen=steps_seen)
    monkeypatch.setattr(tuner, "run_observed", lambda request: observed)
    options = tuner.TuneOptions(out_dir=tmp_path, config_path=tmp_path / "torchboost.toml", budget_s=60.0)
    _, baseline = tuner._doctor_facts(["python", "train.py"], options)
    assert baseline is not None and not baseline.ok
    assert baseline.error == words


@pytest.mark.parametrize("steps_seen, words", [
    (1, "the script ran 1 training step, then exited with code 3"),
    (0, "no training step completed (exit code 3)"),  # twin: a trial that never trained
])
def test_a_trial_that_trained_then_ended_itself_is_said_to_have_trained(steps_seen, words):
    result = result_from_facts(_ended_itself(steps_seen, 0), {}, 0, exit_code=3)
    assert not result.ok and result.error == words
