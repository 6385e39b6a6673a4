"""The loop the shape scripts share: plain PyTorch, random data made once, ``--steps N``.

Each shape module has ``build() -> (model, optimizer, batches)``, where ``batches`` is a
list of (input, target) pairs cycled through, and ``loss(model, x, y)``; run as a script it
trains for ``--steps`` steps (the doctor observes it as it would any script).
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any, Callable


def train(build: Callable[[], tuple[Any, Any, list[Any]]], loss_of: Callable[..., Any], argv: list[str] | None = None) -> None:
    """Train ``build()``'s model for ``--steps`` steps (default 200) on its batches in turn."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    model, optimizer, batches = build()
    model.train()
    for step, (x, y) in zip(range(args.steps), itertools.cycle(batches)):
        loss = loss_of(model, x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")  # a sync, every 50 steps, as nanoGPT logs
