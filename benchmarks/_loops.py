"""One benchmark row in one process: ``python benchmarks/_loops.py --row ROW --workload NAME ...``.

``bench.py`` starts this script once per (row, workload, repeat), so that one row's
thread count, loader workers and compiled code cannot leak into the next. The result
(throughput after the warm-up, loss, peak memory) is written as JSON to ``--result``.

Rows:
  naive       the workload's own plain loop (fp32 eager, num_workers=0)
  hand        the loop a careful engineer writes for this machine (``hand_choices``)
  lightning   Lightning's Trainer with the same choices as its flags
  accelerate  Accelerate's Accelerator with the same choices
  torchboost  the workload's loop through torchboost.Booster (``--config`` or auto)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import torch

from torchboost.workloads import REGISTRY, Workload, make_loader, train

__all__ = ["ROWS", "Choices", "hand_choices", "run_row", "main"]

ROWS = ("naive", "hand", "lightning", "accelerate", "torchboost")
"""Benchmark rows, in table order."""


@dataclass(frozen=True)
class Choices:
    """The settings of the ``hand`` loop (and of the peer rows, which mirror it)."""

    threads: int
    """Intra-op threads (torch.set_num_threads)."""
    num_workers: int
    pin_memory: bool
    optimizer_kwargs: dict[str, Any]
    """Passed to the workload's optimizer: {"fused": True} or {"foreach": True}."""
    bf16: bool
    """bf16 autocast for forward and loss."""
    compile: bool
    reasons: dict[str, str] = field(default_factory=dict)
    """One line per choice: why it is right for this workload on this machine."""

    @property
    def persistent_workers(self) -> bool:
        """Keep workers between epochs whenever there are any."""
        return self.num_workers > 0


def _cpu_bf16() -> bool:
    from torchboost.env import probe

    return probe().cpu_bf16


def hand_choices(workload: str, device: torch.device, size: str = "tiny") -> Choices:
    """What a careful engineer picks from the PyTorch performance tuning guide, per workload.

    Each choice was measured (interleaved child runs, medians) on a shared 2-core AMD EPYC
    with avx512_bf16 and no GPU. There two intra-op threads ran 2-5x slower than one on
    every workload: the cores are busy, and a spinning OpenMP pool loses its slices. On
    CUDA the same reasoning gives workers, pinning and bf16 for every workload.
    """
    cuda = device.type == "cuda"
    cpu_bf16 = not cuda and _cpu_bf16()
    # bf16 matmuls won only from width 256 up here (gpt small: 2.2x); at width 48 they lost 1.7x.
    gpt_bf16 = cpu_bf16 and size != "tiny"
    if cuda:
        return Choices(
            threads=torch.get_num_threads(), num_workers=4, pin_memory=True,
            optimizer_kwargs={"fused": True}, bf16=torch.cuda.is_bf16_supported(), compile=False,
            reasons={
                "num_workers": "4 workers keep the GPU fed while the host augments",
                "pin_memory": "pinned batches copy to the GPU asynchronously",
                "optimizer": "fused Adam/SGD: one kernel per step instead of one per tensor",
                "bf16": "tensor cores run bf16 at several times the fp32 rate",
                "compile": "left off: its minutes of first-call cost do not pay back in a short run",
            },
        )  # fmt: skip
    table: dict[str, Choices] = {
        # Compute bound: matmuls; bf16 only where the matmuls are wide enough to gain.
        "gpt": Choices(
            threads=1, num_workers=0, pin_memory=False, optimizer_kwargs={"fused": True},
            bf16=gpt_bf16, compile=False,
            reasons={
                "threads": "1 thread measured 5x faster than 2 on these shared cores",
                "num_workers": "slicing a byte window costs microseconds: a worker would only add IPC",
                "optimizer": "fused AdamW: measured 4% faster than foreach",
                "bf16": "avx512_bf16 matmuls measured 2.2x faster at width 256" if gpt_bf16
                else "measured 1.7x slower at width 48: casts cost more than the matmuls save",
                "compile": "measured no faster at this size (attention and matmuls dominate)",
            },
        ),
        # Loader bound: augmenting costs more than the model; one worker overlaps it.
        "vision": Choices(
            threads=1, num_workers=1, pin_memory=False, optimizer_kwargs={"fused": True},
            bf16=False, compile=False,
            reasons={
                "threads": "one core for the model, the other for the augmenting worker",
                "num_workers": "1 worker measured 1.4x over 0; 2 no better on 2 cores",
                "optimizer": "fused SGD: one kernel per step",
                "bf16": "measured 14% slower: 8-32 channel convolutions gain nothing from bf16",
                "compile": "off: the loader, not the model, bounds the step",
            },
        ),
        # Host-overhead bound: many tiny ops; a second thread only adds synchronisation.
        "mlp": Choices(
            threads=1, num_workers=0, pin_memory=False, optimizer_kwargs={"fused": True},
            bf16=False, compile=True,
            reasons={
                "threads": "64-wide layers are too small to split: 2 threads measured 7x slower",
                "num_workers": "indexing a tensor row is cheaper than a worker's IPC",
                "optimizer": "fused Adam: measured 1.26x over foreach",
                "bf16": "measured 1.27x slower: casts cost more than 64-wide matmuls save",
                "compile": "fuses the many small ops: measured 1.7x steady state, ~5 s first call",
            },
        ),
        # Loading bound: per-sample CPU work; workers on both cores, model on one thread.
        "data": Choices(
            threads=1, num_workers=2, pin_memory=False, optimizer_kwargs={"fused": True},
            bf16=False, compile=False,
            reasons={
                "threads": "the model is trivial: the cores belong to the loader",
                "num_workers": "2 workers measured 1.6x over 0 (1 worker: no gain)",
                "optimizer": "fused SGD: one kernel per step",
                "bf16": "a linear layer this small gains nothing",
                "compile": "nothing to gain: the model is one matmul",
            },
        ),
    }  # fmt: skip
    return table[workload]


@dataclass
class RowResult:
    """What one row measured in one process."""

    row: str
    workload: str
    samples_per_s: float
    final_loss: float
    first_loss: float
    peak_memory_bytes: int
    """CUDA: max allocated; CPU: the main process's peak resident set size."""
    steps: int
    warmup_steps: int
    total_s: float = 0.0
    """Wall seconds of all steps, warm-up (and any compile) included."""
    choices: dict[str, Any] = field(default_factory=dict)


def _peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # host-device sync: only at the timed window's edges


def _forever(loader) -> Iterator:
    while True:
        yield from loader


def _timed(step: Callable[[Any], torch.Tensor], batches, steps: int, warmup: int, device) -> tuple[float, list]:
    """Run ``step(batch)`` ``steps`` times; seconds after ``warmup`` steps, and the losses."""
    losses: list[torch.Tensor] = []
    start = time.perf_counter()
    for i in range(steps):
        if i == warmup:
            _sync(device)
            start = time.perf_counter()
        losses.append(step(next(batches)).detach())
    _sync(device)
    return time.perf_counter() - start, losses


def _loader(workload: Workload, choices: Choices, seed: int):
    return make_loader(
        workload, seed=seed, num_workers=choices.num_workers, pin_memory=choices.pin_memory,
        persistent_workers=choices.persistent_workers,
    )  # fmt: skip


def _run_hand(workload: Workload, choices: Choices, steps: int, warmup: int, seed: int):
    device = _device()
    torch.set_num_threads(choices.threads)
    model = workload.model.to(device)
    optimizer = workload.make_optimizer(model.parameters(), **choices.optimizer_kwargs)
    forward = torch.compile(model) if choices.compile else model
    autocast = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if choices.bf16 else contextlib.nullcontext
    )
    batches = iter(_forever(_loader(workload, choices, seed)))

    def step(batch):
        x, y = (t.to(device, non_blocking=choices.pin_memory) for t in batch)
        with autocast():
            loss = workload.loss_fn(forward(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # frees gradients instead of writing zeros
        return loss

    model.train()
    return _timed(step, batches, steps, warmup, device)


def _run_accelerate(workload: Workload, choices: Choices, steps: int, warmup: int, seed: int):
    from accelerate import Accelerator

    torch.set_num_threads(choices.threads)
    accelerator = Accelerator(mixed_precision="bf16" if choices.bf16 else "no", cpu=not torch.cuda.is_available())
    model = workload.model
    optimizer = workload.make_optimizer(model.parameters(), **choices.optimizer_kwargs)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader(workload, choices, seed))
    forward = torch.compile(model) if choices.compile else model
    batches = iter(_forever(loader))

    def step(batch):
        x, y = batch
        with accelerator.autocast():
            loss = workload.loss_fn(forward(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    model.train()
    return _timed(step, batches, steps, warmup, accelerator.device)


def _run_lightning(workload: Workload, choices: Choices, steps: int, warmup: int, seed: int):
    import lightning as L

    torch.set_num_threads(choices.threads)
    device = _device()
    marks: dict[str, float] = {}

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = workload.model
            self.forward_net = torch.compile(self.net) if choices.compile else self.net
            self.losses: list[torch.Tensor] = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = workload.loss_fn(self.forward_net(x), y)
            self.losses.append(loss.detach())
            return loss

        def configure_optimizers(self):
            return workload.make_optimizer(self.net.parameters(), **choices.optimizer_kwargs)

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step == warmup and "start" not in marks:
                _sync(device)
                marks["start"] = time.perf_counter()

        def on_train_end(self, trainer, module):
            _sync(device)
            marks["end"] = time.perf_counter()

    module = Module()
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, max_steps=steps,
        precision="bf16-mixed" if choices.bf16 else "32-true", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, callbacks=[Clock()],
    )  # fmt: skip
    trainer.fit(module, train_dataloaders=_loader(workload, choices, seed))
    start = marks.get("start", marks["end"])
    return marks["end"] - start, module.losses


def run_row(row: str, workload_name: str, *, size: str, steps: int, warmup: int, seed: int,
            batch_size: int | None, config: str | None) -> RowResult:  # fmt: skip
    """Build the workload and run one row; the caller is a fresh process."""
    torch.manual_seed(seed)
    workload = REGISTRY[workload_name].build(size, batch_size=batch_size, seed=seed)
    device = _device()
    started = time.perf_counter()
    if row in ("naive", "torchboost"):
        boost_config = None
        if row == "torchboost":
            from torchboost import BoostConfig

            boost_config = config if config is not None else BoostConfig()
        result = train(
            workload, steps=steps, seed=seed, booster=row == "torchboost", config=boost_config,
            warmup_steps=warmup, log=None,
        )  # fmt: skip
        return RowResult(
            row, workload_name, result.samples_per_s, result.final_loss, result.first_loss,
            _peak_memory(device), steps, warmup, time.perf_counter() - started,
        )  # fmt: skip
    choices = hand_choices(workload_name, device, size)
    runner = {"hand": _run_hand, "lightning": _run_lightning, "accelerate": _run_accelerate}[row]
    elapsed, losses = runner(workload, choices, steps, warmup, seed)
    total = time.perf_counter() - started
    curve = torch.stack(losses).float().cpu()
    window = max(1, min(10, steps // 4))
    return RowResult(
        row, workload_name, (steps - warmup) * workload.batch_size / elapsed,
        float(curve[-window:].mean()), float(curve[:window].mean()), _peak_memory(device), steps, warmup,
        total, choices=asdict(choices),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Child entry point: run one row, write its JSON to ``--result``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=ROWS, required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--config", default=None, help="torchboost.toml for the torchboost row")
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    args = parser.parse_args(argv)
    result = run_row(
        args.row, args.workload, size=args.size, steps=args.steps, warmup=args.warmup, seed=args.seed,
        batch_size=args.batch_size, config=args.config,
    )  # fmt: skip
    with open(args.result, "w", encoding="utf-8") as fh:
        json.dump(asdict(result), fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
