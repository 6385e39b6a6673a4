"""MFU for the benchmarks: a workload's model FLOPs per sample and the machine's measured peak.

    MFU = samples/s x FLOPs per sample / peak FLOP/s

FLOPs per sample: one plain fp32 step of the workload (forward, backward, optimizer) under
``torch.utils.flop_counter.FlopCounterMode``, over its batch size; the same model does the
same work in every row, compiled or not. The peak: ``torchboost probe``'s fp32 matmul peak
(cached per machine). A row that trains in bf16 is measured against the fp32 peak too,
where the probe measured no bf16 peak (a CPU without avx512_bf16/AMX).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from torchboost.workloads._loop import Workload, make_loader

__all__ = ["flops_per_sample", "mfu_pct", "one_step", "peak_flops_per_s"]


def one_step(workload: Workload, optimizer: torch.optim.Optimizer, batch: Any) -> None:
    """One plain training step of ``workload`` on ``batch`` (already on the model's device)."""
    x, y = batch
    loss = workload.loss_fn(workload.model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def flops_per_sample(name: str, size: str, seed: int = 0) -> float:
    """Model FLOPs of one sample of workload ``name`` at ``size``, forward and backward."""
    workload = importlib.import_module(f"torchboost.workloads.{name}").build(size, seed=seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    workload.model.to(device)
    optimizer = workload.make_optimizer(workload.model.parameters())
    batch = tuple(t.to(device) for t in next(iter(make_loader(workload, seed=seed))))
    with FlopCounterMode(display=False) as counter:
        one_step(workload, optimizer, batch)
    return counter.get_total_flops() / workload.batch_size


def peak_flops_per_s() -> tuple[float | None, str]:
    """The probe's fp32 matmul peak on this machine (cached; measured once) and its words."""
    from torchboost.limits import machine_limits
    from torchboost.report.limits_text import flops_text

    device = "cuda" if torch.cuda.is_available() else "cpu"
    limits, _ = machine_limits(device)
    peak = limits.peak_flops_per_s("fp32")
    return peak, f"fp32 matmul peak {flops_text(peak)} ({limits.name}, {limits.threads} threads)"


def mfu_pct(samples_per_s: float | None, per_sample: float | None, peak: float | None) -> float | None:
    """100 x samples/s x FLOPs per sample / peak; None when any is unknown."""
    if not samples_per_s or not per_sample or not peak:
        return None
    return 100.0 * samples_per_s * per_sample / peak
