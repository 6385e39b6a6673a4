"""A DDP step the all-reduce holds: gloo, 2 ranks, one large Linear, batch 2.

``torchrun --standalone --nproc_per_node=2 ddp_allreduce.py``: plain DDP over gloo, a
2048x2048 Linear (16 MiB of fp32 gradients to all-reduce every step) fed 2 samples per
rank, SGD. Its forward and backward are a few million FLOPs; the step is the all-reduce.

``--by-hand``: instead of training, time the step by hand, interleaved, with the
all-reduce (a plain DDP step) and without it (the same step under ``model.no_sync()``),
and ``dist.all_reduce`` of a tensor the size of the gradients alone; rank 0 prints the
medians as JSON. The difference of the first two is what the all-reduce costs the step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

WIDTH = 2048
BATCH = 2


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def _timed(fn) -> float:
    dist.barrier()  # both ranks start together: a rank's wait for the other is not the step's
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def by_hand(model: DistributedDataParallel, optimizer: torch.optim.Optimizer, x: torch.Tensor,
            y: torch.Tensor, rounds: int) -> dict[str, float]:
    """Median ms of a DDP step, the same step under no_sync, and an all-reduce of the gradients' size."""
    flat = torch.zeros(sum(p.numel() for p in model.parameters()))

    def quiet_step() -> None:
        with model.no_sync():
            _step(model, optimizer, x, y)

    synced, unsynced, reduce = [], [], []
    for _ in range(rounds):
        synced.append(_timed(lambda: _step(model, optimizer, x, y)))
        unsynced.append(_timed(quiet_step))
        reduce.append(_timed(lambda: dist.all_reduce(flat)))
    return {"step_ms": statistics.median(synced), "no_sync_step_ms": statistics.median(unsynced),
            "all_reduce_ms": statistics.median(reduce), "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--by-hand", type=int, default=0, metavar="ROUNDS",
                        help="time ROUNDS interleaved rounds by hand instead of training")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(args.width, args.width))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, args.width), torch.randn(BATCH, args.width)
    try:
        if args.by_hand:
            for _ in range(3):  # warm-up: DDP rebuilds its buckets after the first step
                _step(model, optimizer, x, y)
            figures = by_hand(model, optimizer, x, y, args.by_hand)
            if dist.get_rank() == 0:
                print(json.dumps(figures), flush=True)
            return
        for step in range(args.steps):
            loss = _step(model, optimizer, x, y)
            if step % 50 == 0 and dist.get_rank() == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
