"""Several processes under ``torchrun``: the process group, DDP, and a sharded loader.

The same user script runs unchanged under ``torchrun --nproc-per-node N``: torchrun sets
RANK, WORLD_SIZE, MASTER_ADDR, ...; :func:`make_distributed` reads them from the probed
:class:`~torchboost.env.Environment`, initialises the process group (nccl for CUDA, gloo
for CPU) unless the script already did, and returns an object that wraps the model in
``DistributedDataParallel`` and rebuilds the loader with a ``DistributedSampler`` (same
shuffle, and one seed agreed by every rank). One process (or WORLD_SIZE 1) gets the null
object :class:`SingleProcess`, which changes nothing. There is no launcher of our own.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from torchboost.env import Environment

__all__ = ["DistributedWarning", "Distributed", "SingleProcess", "make_distributed", "unwrap_model"]


class DistributedWarning(UserWarning):
    """A loader could not be sharded over the processes; each sees all of its data."""


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (the model itself otherwise): its state_dict has
    the same keys as in a single-process run."""
    return model.module if isinstance(model, DistributedDataParallel) else model


class SingleProcess:
    """One process: the null object. Nothing is wrapped, sharded or communicated."""

    rank = 0
    world_size = 1

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """The model, unchanged."""
        return model

    def shard_loader(self, loader: Any) -> Any:
        """The loader, unchanged."""
        return loader

    def reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value``: the sum over one process."""
        return value

    def describe(self) -> str:
        """One line for the resolved configuration."""
        return "one process"


class Distributed(SingleProcess):
    """``world_size`` processes in an initialised process group; this one is ``rank``."""

    def __init__(self, *, rank: int, world_size: int, device: torch.device) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """``DistributedDataParallel(model)``: gradients are averaged over the processes."""
        if isinstance(model, DistributedDataParallel):
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def shard_loader(self, loader: Any) -> Any:
        """A DataLoader like ``loader`` whose sampler gives this rank its 1/W share.

        Kept as is (with a :class:`DistributedWarning`) when it cannot be sharded here:
        an IterableDataset (shard it by rank in the dataset), a custom batch sampler, or
        a sampler that is neither sequential nor random.
        """
        if not isinstance(loader, DataLoader) or isinstance(loader.sampler, DistributedSampler):
            return loader
        why = None
        if isinstance(loader.dataset, IterableDataset):
            why = "an IterableDataset: shard it by rank inside the dataset"
        elif loader.batch_size is None:
            why = "a custom batch_sampler (or no automatic batching): make it rank-aware"
        elif type(loader.sampler).__name__ not in ("SequentialSampler", "RandomSampler"):
            why = f"a {type(loader.sampler).__name__}: make it rank-aware"
        if why is not None:
            warnings.warn(f"the loader is not sharded over {self.world_size} processes: {why}", DistributedWarning)
            return loader
        shuffle = isinstance(loader.sampler, RandomSampler)
        sampler = DistributedSampler(
            loader.dataset,
            num_replicas=self.world_size,
            rank=self.rank,
            shuffle=shuffle,
            seed=self._agreed_seed(loader),
            drop_last=loader.drop_last,
        )
        kwargs: dict[str, Any] = dict(
            dataset=loader.dataset,
            batch_size=loader.batch_size,
            sampler=sampler,
            drop_last=loader.drop_last,
            collate_fn=loader.collate_fn,
            num_workers=loader.num_workers,
            pin_memory=loader.pin_memory,
            timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn,
            multiprocessing_context=loader.multiprocessing_context,
            generator=loader.generator,
            persistent_workers=loader.persistent_workers,
        )
        if loader.num_workers > 0:
            kwargs["prefetch_factor"] = loader.prefetch_factor
        if hasattr(loader, "in_order"):
            kwargs["in_order"] = loader.in_order
        return DataLoader(**kwargs)

    def _agreed_seed(self, loader: DataLoader) -> int:
        # Every rank must draw the same permutation: take rank 0's seed (the loader's
        # generator seed, else torch's initial seed) so an unseeded rank cannot disagree.
        generator = loader.generator or getattr(loader.sampler, "generator", None)
        seed = generator.initial_seed() if generator is not None else torch.initial_seed()
        value = torch.tensor([seed % (2**62)], dtype=torch.int64, device=self._comm_device())
        dist.broadcast(value, src=0)
        return int(value.item())

    def reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of ``value`` over every process (a collective: every rank must call it)."""
        value = value.to(self._comm_device()).clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def _comm_device(self) -> torch.device:
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")

    def describe(self) -> str:
        """One line for the resolved configuration."""
        return f"rank {self.rank} of {self.world_size} ({dist.get_backend()}), DDP"


def make_distributed(env: Environment, device: torch.device) -> SingleProcess:
    """:class:`Distributed` when torchrun started more than one process, else :class:`SingleProcess`.

    Initialises the default process group from torchrun's environment (nccl on CUDA,
    gloo otherwise) unless it is initialised already; on CUDA it also makes ``device``
    the current device, as nccl expects.
    """
    world = env.world_size
    if world <= 1:
        return SingleProcess()
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Distributed(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device)
