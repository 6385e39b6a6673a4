"""Evaluation between the training steps: its share of the run, its gradients, its batch."""

from __future__ import annotations

from _diagnose_helpers import make_facts

from torchboost.diagnose._eval_rules import evaluation_batch, evaluation_grad, evaluation_often
from torchboost.evidence.evaluation_facts import EvaluationFacts
from torchboost.evidence.host_lines import HostLine
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.steps import evaluation_share


def _facts(eval_ms: float = 200.0, *, grad_calls: int = 40, batch: int = 16):
    facts = make_facts()
    for step in facts.steps[::5]:
        step.eval_ms = eval_ms
    facts.evaluation = EvaluationFacts(calls=40, grad_calls=grad_calls, batch_size=batch, train_batch_size=64)
    return facts


def test_the_share_is_of_the_run_steps_and_evaluation_together():
    share = evaluation_share(_facts())
    assert share["passes"] == 2 and share["every"] == 5 and share["per_pass_ms"] == 200.0
    assert round(share["pct"], 1) == round(100 * 400 / (400 + 1000), 1)  # 10 steps of 100 ms, 2 passes of 200 ms
    assert evaluation_share(make_facts()) is None  # the twin: no evaluation


def test_evaluating_often_fires_on_a_large_share_and_not_on_a_small_one():
    found = evaluation_often(_facts())
    assert found is not None and "every 5 steps" in found.title and "evaluate every 25 steps" in found.title
    assert round(found.expected_speedup, 3) == round(1400 / (1400 - 400 * 0.8), 3)
    assert evaluation_often(_facts(eval_ms=20.0)) is None


def test_gradients_on_in_evaluation_fire_and_under_no_grad_do_not():
    found = evaluation_grad(_facts())
    assert found is not None and "40 of its 40 calls" in found.title and "inference_mode" in found.advice_code
    assert evaluation_grad(_facts(grad_calls=0)) is None


def test_a_small_evaluation_batch_fires_and_one_as_large_as_trainings_does_not():
    found = evaluation_batch(_facts())
    assert found is not None and "batches of 16, training in 64" in found.title and "256" in found.title
    assert evaluation_batch(_facts(batch=64)) is None


def test_the_evaluation_is_named_at_the_loops_line_that_runs_it():
    facts = _facts()
    rows = {s.index: 150.0 for s in facts.steps[::5]}
    facts.host = HostFacts(lines=[HostLine("evaluation", "/home/me/train.py", 13, "correct += (out == y).sum()", "",
                                           rows, via="train.py:24")], line_interval_ms=2.0)
    assert "(train.py:24)" in evaluation_often(facts).title
