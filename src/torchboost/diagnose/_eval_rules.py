"""Rules over the evaluation a script runs between its training steps.

Evaluation is no part of the training step (:mod:`torchboost.observe.record.evaluation`): its
time is each step's ``eval_ms``, and its share is of the run, steps and evaluation together
(:func:`~torchboost.evidence.steps.evaluation_share`). Three findings, each with the evaluation's own line (the line
sampler's "evaluation" rows) and the fix in the script's words: it runs too often for what
it costs (:func:`evaluation_often`), it builds an autograd graph for nothing
(:func:`evaluation_grad`: ``model.eval()`` but no ``torch.no_grad()``), its batch is smaller
than training's although it keeps no activations (:func:`evaluation_batch`). Their ratios are
of the run's time, not of a step's. Registered in :data:`torchboost.diagnose.rules.RULES`.
"""

from __future__ import annotations

from typing import Any

from torchboost.evidence.evaluation_facts import EvaluationFacts
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import r
from torchboost.evidence.steps import evaluation_share

__all__ = ["EVAL_LESS_OFTEN", "evaluation_batch", "evaluation_grad", "evaluation_often"]

EVAL_LESS_OFTEN = 5
"""How many times less often the fix proposes to evaluate."""
GRAD_SAVED = 0.15
"""The share of an evaluation's time the autograd graph costs it, assumed (a forward under
``torch.no_grad()`` took 85 ms where it took 100 ms with gradients on, by hand, on a CPU)."""
BATCH_SAVED = 0.5
"""The share of an evaluation's time a batch 4x larger saves, assumed (fewer, larger calls:
34 to 41 ms where batches of 16 took 97 to 105 ms, by hand, with batches of 512)."""


def _saved(share: dict[str, Any], saved_ms: float) -> tuple[float, str]:
    total = share["eval_ms"] + share["steps_ms"]
    ratio = total / max(total - saved_ms, 1e-9)
    return ratio, (f"(S + E) / (S + E - saved) = ({share['steps_ms']:.0f} + {share['eval_ms']:.0f}) / "
                   f"({total:.0f} - {saved_ms:.0f}) = {ratio:.3f}; S ms of steps and E ms of evaluation over "
                   "the measured steps: a ratio of the run's time")


def _evidence(share: dict[str, Any]) -> dict[str, Any]:
    found = {"eval_pct": r(share["pct"], 1), "eval_ms_per_pass": r(share["per_pass_ms"]),
             "every_steps": share["every"], "passes": share["passes"]}
    return {**found, "line": share["where"]} if share["where"] else found


def _at(share: dict[str, Any]) -> str:
    return f" ({share['where']})" if share["where"] else ""


def evaluation_often(facts: Facts, *, eval_pct: float = 20.0) -> Finding | None:
    """Evaluation takes ``eval_pct`` percent of the run or more: evaluate less often."""
    share = evaluation_share(facts)
    if share is None or share["pct"] < eval_pct:
        return None
    later = share["every"] * EVAL_LESS_OFTEN
    ratio, formula = _saved(share, share["eval_ms"] * (1 - 1 / EVAL_LESS_OFTEN))
    return Finding(
        id="evaluation.often",
        title=f"Evaluation every {share['every']} steps{_at(share)} takes {share['pct']:.0f}% of the run "
              f"({share['per_pass_ms']:.0f} ms a pass): evaluate every {later} steps",
        evidence=_evidence(share),
        advice=f"how often to evaluate is the script's choice: every {later} steps costs {EVAL_LESS_OFTEN}x less",
        advice_code=f"if step % {later} == 0:\n    acc = evaluate()",
        expected_speedup=ratio,
        formula=f"{formula}; evaluation {EVAL_LESS_OFTEN}x less often",
        notes=["The evaluation's time is kept out of the step times above; this ratio is of the whole run."],
    )


def _graph_saved(share: dict[str, Any], seen: EvaluationFacts) -> tuple[float, str] | None:
    """What the autograd graph costs the measured evaluation, ms, and how it was found: its
    calls timed with gradients on and off (None: measured, and it costs nothing)."""
    if seen.grad_call_ms is not None and seen.no_grad_call_ms is not None:
        per_call = seen.grad_call_ms - seen.no_grad_call_ms
        if per_call <= 0.03 * seen.grad_call_ms:
            return None
        calls = seen.grad_calls / max(seen.passes, 1) * share["passes"]
        return per_call * calls, (f"the graph measured: a call took {seen.grad_call_ms:.2f} ms with gradients on, "
                                  f"{seen.no_grad_call_ms:.2f} ms off (medians of {seen.timed_calls} calls), "
                                  f"x {calls:.0f} calls")
    return share["eval_ms"] * GRAD_SAVED, f"the graph assumed {GRAD_SAVED:.0%} of the evaluation's time"


def evaluation_grad(facts: Facts, *, eval_pct: float = 5.0) -> Finding | None:
    """Evaluation runs with gradients on (``model.eval()`` without ``torch.no_grad()``) and
    takes ``eval_pct`` percent of the run or more: run it under ``torch.inference_mode()``.
    Its calls timed with gradients on and off say what the graph costs; none fires where
    that was measured at nothing."""
    share, seen = evaluation_share(facts), facts.evaluation or EvaluationFacts()
    if share is None or share["pct"] < eval_pct or not seen.calls or seen.grad_calls * 2 < seen.calls:
        return None
    saved = _graph_saved(share, seen)
    if saved is None:
        return None
    ratio, formula = _saved(share, saved[0])
    return Finding(
        id="evaluation.grad",
        title=f"Evaluation{_at(share)} runs with gradients on ({seen.grad_calls} of its {seen.calls} calls): "
              "run it under torch.inference_mode()",
        evidence={**_evidence(share), "grad_calls": seen.grad_calls, "calls": seen.calls},
        advice="model.eval() switches dropout and batch norm, not gradients: each evaluation call still builds "
               "an autograd graph nothing reads; the metric is the same without it",
        advice_code="model.eval()\nwith torch.inference_mode():  # no autograd graph: the same outputs, less time\n"
                    "    acc = evaluate()\nmodel.train()",
        expected_speedup=ratio,
        formula=f"{formula}; {saved[1]}",
    )


def evaluation_batch(facts: Facts, *, eval_pct: float = 10.0) -> Finding | None:
    """Evaluation's batch is smaller than training's while it takes ``eval_pct`` percent of
    the run or more: without gradients it keeps no activations, so a larger one fits."""
    share, seen = evaluation_share(facts), facts.evaluation or EvaluationFacts()
    if share is None or share["pct"] < eval_pct or not seen.batch_size or not seen.train_batch_size:
        return None
    if seen.batch_size >= seen.train_batch_size:
        return None
    larger = seen.train_batch_size * 4
    ratio, formula = _saved(share, share["eval_ms"] * BATCH_SAVED)
    return Finding(
        id="evaluation.batch",
        title=f"Evaluation{_at(share)} runs in batches of {seen.batch_size}, training in {seen.train_batch_size}: "
              f"evaluate in batches of {larger}",
        evidence={**_evidence(share), "eval_batch_size": seen.batch_size, "train_batch_size": seen.train_batch_size},
        advice="without gradients a batch keeps no activations for a backward: several times training's fits, "
               "in fewer, larger calls; the metric is the same",
        advice_code=f"val_loader = DataLoader(val_set, batch_size={larger})  # evaluation only",
        expected_speedup=ratio,
        formula=f"{formula}; a batch 4x larger assumed to save {BATCH_SAVED:.0%} of the evaluation's time",
    )
