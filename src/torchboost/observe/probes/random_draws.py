"""The ops of one training step that draw random numbers (dropout's masks, noise, sampling).

A ``TorchDispatchMode`` sees every aten op of the step; the ones torch tags
``nondeterministic_seeded`` consume the random generator (``native_dropout``, ``bernoulli_``,
``randn``...). Entered with :class:`~torchboost.observe.probes.flop_count.StepFlops`, in the
same unrecorded step, so its cost is in no figure.

Why it matters: a change that runs those ops in code of its own draws other random numbers.
``torch.compile`` generates its random numbers in its kernels, so a compiled dropout keeps
other units than eager's, and the same seed no longer gives the same losses step by step.
Tune then judges such a change on the losses' trend (:func:`torchboost.tune.search.parity.judge`).
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["RandomDraws"]


class RandomDraws(TorchDispatchMode):
    """Names the random ops the step runs, by op packet ("aten.native_dropout");
    :attr:`ops` after the mode is left."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))
