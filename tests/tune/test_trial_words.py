"""A trial's failure in words: a script that ended within its warm-up is said as the doctor says it."""

from __future__ import annotations

import pytest

from torchboost.evidence.observed import Facts
from torchboost.tune.trials.trial import result_from_facts


@pytest.mark.parametrize("ended, code, words", [
    ("finished", 0, "the script ended after 3 training steps, all within the 5 warm-up steps"),
    ("crashed", 1, "no training step completed (exit code 1)"),  # twin: a crash in warm-up is a crash
])
def test_a_script_that_ended_in_its_warm_up_is_counted_as_the_doctor_counts_it(ended, code, words):
    facts = Facts(steps=[], steps_seen=3, warmup_steps=5, ended=ended, warmup_step_ms=[9.0, 1.0, 1.0])
    result = result_from_facts(facts, {}, 0, exit_code=code)
    assert not result.ok and result.error.startswith(words)
