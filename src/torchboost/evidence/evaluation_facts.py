"""The evaluation a script runs between its training steps, as plain data.

The observer tells evaluation from training by the calls of the trained model
(:mod:`torchboost.observe.record.evaluation`): a call with gradients off, or in eval mode
(``model.eval()``) with gradients still on. Its time is each step's ``eval_ms``, outside
the step; here is what the rules need besides: how many of its calls built an autograd
graph for nothing, and the batch it ran with.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EvaluationFacts"]


@dataclass
class EvaluationFacts:
    """The evaluation calls of the trained model the observer saw, in the recorded steps."""

    passes: int = 0
    """Evaluation passes seen, warm-up included."""
    calls: int = 0
    """Outermost calls of the trained model within evaluation, warm-up included."""
    grad_calls: int = 0
    """Those of them made with gradients on (``model.eval()`` but no ``torch.no_grad()``):
    each builds an autograd graph no backward reads."""
    batch_size: int | None = None
    """The evaluation loader's batch size (None: no loader of its own seen, or unknown)."""
    train_batch_size: int | None = None
    """The training loader's, for comparison."""
    grad_call_ms: float | None = None
    """Median time of an evaluation call with gradients on, ms (None: not measured)."""
    no_grad_call_ms: float | None = None
    """Median time of one the observer ran with gradients off, as ``torch.no_grad()`` would,
    every other call of the passes after the first (None: not measured)."""
    timed_calls: int = 0
    """The calls those two medians rest on."""
