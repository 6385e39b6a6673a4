"""The one plain training loop every built-in workload runs, and its command line.

``train`` is what a careful user's ``train.py`` does: a DataLoader with
``num_workers=0``, fp32 eager, ``loss.backward()``, ``optimizer.step()``,
``optimizer.zero_grad()``. With ``booster=True`` the same loop goes through
``torchboost.Booster``; the step itself has no feature ``if``: the two paths differ
only in the null objects chosen once at setup.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torchboost.booster import Booster

__all__ = ["Workload", "RunResult", "make_loader", "train", "main_for"]

SIZES = ("tiny", "small", "gpt2")
"""Size names every workload accepts (each maps them to its own shapes)."""


@dataclass
class Workload:
    """A training problem in parts: everything a loop needs, nothing about how to run it."""

    name: str
    model: nn.Module
    dataset: Dataset
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
    """``loss_fn(model(x), y)`` -> scalar loss tensor."""
    make_optimizer: Callable[..., torch.optim.Optimizer]
    """``make_optimizer(params, **kwargs)``; kwargs (e.g. ``fused=True``) go to the optimizer."""
    batch_size: int
    """Samples per step."""
    collate_fn: Callable[[list], Any] | None = None
    description: str = ""

    def parameter_count(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


@dataclass
class RunResult:
    """What one run of the loop measured; ``to_dict`` is the script's final JSON line."""

    workload: str
    steps: int
    """Optimizer steps run, warm-up included."""
    warmup_steps: int
    """Steps left out of the throughput (first-call and allocator costs)."""
    batch_size: int
    samples_per_s: float
    """Samples per second over the steps after the warm-up."""
    first_loss: float
    """Mean loss over the first ``loss_window`` steps."""
    final_loss: float
    """Mean loss over the last ``loss_window`` steps."""
    loss_window: int
    elapsed_s: float
    """Wall time of the timed (post-warm-up) steps, seconds."""
    booster: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return dict(self.__dict__)


def make_loader(workload: Workload, *, seed: int = 0, **loader_kwargs: Any) -> DataLoader:
    """The workload's DataLoader: shuffled, last partial batch dropped, seeded."""
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        workload.dataset,
        batch_size=workload.batch_size,
        shuffle=True,
        drop_last=True,
        collate_fn=workload.collate_fn,
        generator=generator,
        **loader_kwargs,
    )


def _forever(loader: Iterable) -> Iterable:
    # Epochs end; the loop counts steps, so start the loader again when it runs out.
    while True:
        yield from loader


def _sync(device: torch.device) -> None:
    # Host-device sync: only at the edges of the timed window, never in the step.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return type(batch)(_to(b, device) for b in batch)


def train(
    workload: Workload,
    *,
    steps: int = 100,
    seed: int = 0,
    booster: bool = False,
    config: Any = None,
    warmup_steps: int | None = None,
    log_every: int = 10,
    log: Callable[[str], None] | None = print,
) -> RunResult:
    """Run ``steps`` optimizer steps of ``workload``; return what was measured.

    ``booster=False``: plain PyTorch, fp32 eager, ``num_workers=0``, model on CUDA when
    there is one. ``booster=True``: the same loop through ``torchboost.Booster``
    (``config`` a BoostConfig, or None to read ``./torchboost.toml`` / auto defaults).
    ``warmup_steps`` (default: a tenth of the steps, at most 10) are left out of
    ``samples_per_s``. ``log`` gets one line every ``log_every`` steps.
    """
    if steps < 2:
        raise ValueError(f"steps: need at least 2 to measure; got {steps}")
    torch.manual_seed(seed)
    warmup = min(10, steps // 10) if warmup_steps is None else warmup_steps
    if not 0 <= warmup < steps:
        raise ValueError(f"warmup_steps: need 0 <= warmup_steps < steps ({steps}); got {warmup}")
    loader = make_loader(workload, seed=seed)
    parts = _booster_parts(workload, loader, config) if booster else _plain_parts(workload, loader)
    losses, elapsed = _timed_steps(workload, parts, steps=steps, warmup=warmup, log_every=log_every, log=log)
    return _result(workload, losses, elapsed, steps=steps, warmup=warmup, booster=booster)


@dataclass
class _Parts:
    """What the step runs on, chosen once at setup: plain PyTorch's or the Booster's."""

    model: nn.Module
    optimizer: Any
    loader: Iterable
    device: torch.device
    autocast: Callable[[], Any]
    backward: Callable[[torch.Tensor], Any]


def _booster_parts(workload: Workload, loader: DataLoader, config: Any) -> _Parts:
    boost = Booster() if config is None else Booster(config=config)
    optimizer = workload.make_optimizer(workload.model.parameters())
    model, optimizer, loader = boost.prepare(workload.model, optimizer, loader)
    return _Parts(model, optimizer, loader, boost.device, boost.autocast, boost.backward)


def _plain_parts(workload: Workload, loader: DataLoader) -> _Parts:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = workload.model.to(device)  # before the optimizer, so it holds the device's parameters
    optimizer = workload.make_optimizer(model.parameters())
    return _Parts(model, optimizer, loader, device, contextlib.nullcontext, torch.Tensor.backward)


def _timed_steps(workload: Workload, parts: _Parts, *, steps: int, warmup: int, log_every: int,
                 log: Callable[[str], None] | None) -> tuple[list[torch.Tensor], float]:
    """Run the steps; returns each step's loss and the wall time of those after ``warmup``."""
    model, optimizer, device = parts.model, parts.optimizer, parts.device
    autocast, backward = parts.autocast, parts.backward
    model.train()
    losses: list[torch.Tensor] = []
    start = time.perf_counter()
    batches = iter(_forever(parts.loader))
    for step in range(steps):
        if step == warmup:
            _sync(device)
            start = time.perf_counter()
        x, y = _to(next(batches), device)
        with autocast():
            loss = workload.loss_fn(model(x), y)
        backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # A copy, not the tensor: under CUDA graphs (compile's reduce-overhead) a loss the
        # graph returns is its static output, which the next replay overwrites. One scalar.
        losses.append(loss.detach().clone())
        if log is not None and log_every and (step + 1) % log_every == 0:
            # .item() syncs with the device; only on logging steps.
            log(f"{workload.name}: step {step + 1}/{steps} loss {loss.item():.4f}")
    _sync(device)
    return losses, time.perf_counter() - start


def _result(workload: Workload, losses: list[torch.Tensor], elapsed: float, *, steps: int, warmup: int,
            booster: bool) -> RunResult:
    curve = torch.stack(losses).float().cpu()
    window = max(1, min(10, steps // 4))
    timed = (steps - warmup) * workload.batch_size
    return RunResult(
        workload=workload.name,
        steps=steps,
        warmup_steps=warmup,
        batch_size=workload.batch_size,
        samples_per_s=timed / elapsed if elapsed > 0 else math.inf,
        first_loss=float(curve[:window].mean()),
        final_loss=float(curve[-window:].mean()),
        loss_window=window,
        elapsed_s=elapsed,
        booster=booster,
    )


def _parser(name: str, description: str, sizes: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m torchboost.workloads.{name}", description=description)
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    parser.add_argument("--batch-size", type=int, default=None, help="samples per step (default: per size)")
    parser.add_argument("--size", choices=list(sizes), default="tiny", help="model/data size (default tiny)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=10, help="print a line every N steps (default 10)")
    parser.add_argument(
        "--booster", action="store_true", help="run through torchboost.Booster (reads ./torchboost.toml)"
    )
    return parser


def main_for(
    name: str,
    build: Callable[..., Workload],
    argv: Sequence[str] | None,
    *,
    sizes: Sequence[str] = SIZES,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """The ``python -m torchboost.workloads.NAME`` script: parse, build, train, print JSON.

    ``add_arguments`` adds the workload's own options; each becomes a keyword of ``build``.
    Exits 2 on bad usage; the last stdout line is the :class:`RunResult` as JSON.
    """
    description = (build.__doc__ or name).strip().splitlines()[0]
    parser = _parser(name, description, sizes)
    common = set(vars(parser.parse_args([])))  # the shared options; the rest go to build()
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    extra = {k: v for k, v in vars(args).items() if k not in common}
    torch.manual_seed(args.seed)
    try:
        workload = build(args.size, batch_size=args.batch_size, seed=args.seed, **extra)
    except ValueError as exc:
        parser.error(str(exc))
    result = train(
        workload, steps=args.steps, seed=args.seed, booster=args.booster, log_every=args.log_every
    )
    print(json.dumps(result.to_dict()), flush=True)
    return 0
