"""A plain training script run under ``torchrun --nproc-per-node 2`` by tests/test_distributed.py.

    python -m torch.distributed.run --standalone --nproc-per-node 2 ddp_train.py OUT.json CKPT

Nothing in it is distributed-specific: ``prepare`` initialises the process group (gloo on
CPU), wraps DDP and shards the loader. Rank 0 writes what it measured to OUT.json: at every
real step, the relative error of the gradient against a single-process full-batch
reference (and of a broken twin: rank 0's local gradient only), and the DDP all-reduces
counted per window by a communication hook.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import torchboost
from torchboost import BoostConfig

K = 4


def _rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """Relative error of the whole gradient: ||a - b|| / ||b|| over every parameter."""
    diff = torch.cat([(x - y).flatten() for x, y in zip(a, b)])
    return (diff.norm() / torch.cat([y.flatten() for y in b]).norm()).item()


def _grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    ref = copy.deepcopy(model)
    ref.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(ref(x), y).backward()
    return [p.grad for p in ref.parameters()]


def main() -> None:
    out_path, ckpt_path = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(34, 8, generator=g), torch.randint(0, 3, (34,), generator=g))
    # 34 samples: 17 per rank, in batches of 5, 5, 5, 2: one window of uneven micro-batches.
    loader = DataLoader(data, batch_size=5)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    booster = torchboost.Booster(BoostConfig.off().replace(accumulation={"steps": K}), device="cpu")
    model, optimizer, loader = booster.prepare(model, optimizer, loader)

    calls = [0]

    def counting_hook(state, bucket):
        calls[0] += 1
        return allreduce_hook(None, bucket)

    model.register_comm_hook(None, counting_hook)
    world = booster.world_size
    seen = torch.cat([torch.tensor(list(DistributedSampler(data, world, r, shuffle=False))) for r in range(world)])
    mine = torch.tensor(list(DistributedSampler(data, world, booster.rank, shuffle=False)))
    x_all, y_all = data.tensors
    record: dict = {"rel_err": [], "local_only_rel_err": [], "allreduce_per_window": []}

    def before_step(opt, args, kwargs):
        got = [p.grad.clone() for p in model.parameters()]
        want = _grads(model.module, x_all[seen], y_all[seen])
        record["rel_err"].append(_rel(got, want))
        record["local_only_rel_err"].append(_rel(_grads(model.module, x_all[mine], y_all[mine]), want))
        record["allreduce_per_window"].append(calls[0])
        calls[0] = 0

    optimizer.optimizer.register_step_pre_hook(before_step)
    for _ in range(2):
        for x, y in loader:
            with booster.accumulate(model):
                booster.backward(nn.functional.cross_entropy(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
    booster.save(ckpt_path, model=model, optimizer=optimizer)
    record["real_steps"] = optimizer.real_steps

    # Broken twin of the count: accumulating without no_sync all-reduces every micro-step.
    calls[0] = 0
    for x, y in loader:
        nn.functional.cross_entropy(model(x), y).backward()
    record["naive_allreduces"] = calls[0]
    record["unwrapped_keys"] = sorted(model.module.state_dict())
    if booster.is_main_process:
        with open(out_path, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
    dist.destroy_process_group()
    # Everything is written. Freeing the DDP model now would deadlock now and then on
    # torch 2.13: the gloo process group's destructor joins a worker thread that waits for
    # the GIL to release this script's Python comm-hook future, while the destructor holds
    # the GIL. So the process leaves without freeing it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
