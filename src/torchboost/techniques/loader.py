"""DataLoader tuning: worker processes, pinned memory, prefetching, and batches moved to the device.

Three pieces, each usable on its own:

* :func:`resolve_host` turns ``[loader]`` and ``[cpu]`` config (``auto``/``keep``/values)
  into concrete :class:`LoaderSettings` and an intra-op thread count, with a reason each.
* :func:`rebuild_loader` builds a new DataLoader with those settings that yields the same
  batches in the same order (same dataset, sampler, generator, collate_fn, ...).
* :class:`DeviceLoader` (in :mod:`torchboost.techniques.batches`, re-exported here)
  wraps a loader so iterating it yields batches already on the training device.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from torchboost.config import CpuConfig, LoaderConfig
from torchboost.env import Environment
from torchboost.techniques.cpu import resolve_threads
from torchboost.techniques.batches import DeviceLoader, map_tensors, move_to_device
from torchboost.techniques.dataset_cost import CHEAP_BATCH_MS, measure_batch_load_ms
from torchboost.techniques.worker_ipc import available as sharing_available
from torchboost.techniques.worker_ipc import sharing_of, with_sharing

__all__ = [
    "DeviceLoader",
    "LOADER_FIELDS",
    "LoaderSettings",
    "auto_num_workers",
    "map_tensors",
    "move_to_device",
    "rebuild_loader",
    "resolve_host",
]

GiB = 1024**3

LOADER_FIELDS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "sharing_strategy")
"""The ``[loader]`` fields, in the order of :class:`LoaderSettings`."""

WORKER_RAM_BYTES = 1 * GiB
"""RAM budgeted per loader worker, bytes: a forked worker touches (and so copies) the
Python objects of the dataset it reads, and holds ``prefetch_factor`` batches."""

RAM_FRACTION = 0.5
"""Share of the available RAM that ``auto`` lets loader workers take."""

MAX_WORKERS = 8
"""Upper bound of ``auto`` workers per training process; more rarely helps one device."""

DEFAULT_PREFETCH = 2
"""torch's own prefetch_factor when there are workers."""


@dataclass(frozen=True)
class LoaderSettings:
    """The DataLoader arguments torchboost may change. Plain data."""

    num_workers: int
    """Worker processes (0 = load in the main process)."""
    pin_memory: bool
    """Collate batches into page-locked memory (fast, asynchronous copies to CUDA)."""
    persistent_workers: bool
    """Keep workers alive between epochs; only legal with num_workers > 0."""
    prefetch_factor: int | None
    """Batches loaded ahead per worker; None exactly when num_workers == 0."""
    sharing_strategy: str | None = None
    """How workers hand batches over (:mod:`~torchboost.techniques.worker_ipc`); None:
    torch's default. Always None with 0 workers."""

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0; got {self.num_workers}")
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor is not None):
            raise ValueError(
                "persistent_workers=True and prefetch_factor need num_workers > 0; "
                "use persistent_workers=False, prefetch_factor=None with 0 workers"
            )
        if self.num_workers > 0 and (self.prefetch_factor is None or self.prefetch_factor < 1):
            raise ValueError(f"prefetch_factor must be >= 1 with workers; got {self.prefetch_factor}")
        if self.num_workers == 0 and self.sharing_strategy is not None:
            raise ValueError("a sharing strategy needs num_workers > 0: nothing crosses processes without workers")

    @classmethod
    def of(cls, loader: DataLoader) -> "LoaderSettings":
        """The settings ``loader`` was built with."""
        return cls(
            num_workers=loader.num_workers,
            pin_memory=bool(loader.pin_memory),
            persistent_workers=bool(loader.persistent_workers),
            prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
            sharing_strategy=sharing_of(loader.worker_init_fn) if loader.num_workers > 0 else None,
        )


def auto_num_workers(
    *,
    cpu_cores: int,
    ram_available_bytes: int,
    device_type: str,
    local_processes: int = 1,
    worker_ram_bytes: int = WORKER_RAM_BYTES,
    ram_fraction: float = RAM_FRACTION,
    max_workers: int = MAX_WORKERS,
) -> tuple[int, str]:
    """The ``auto`` rule for a map-style dataset: worker processes, and why.

    Args:
        cpu_cores: cores this process may run on.
        ram_available_bytes: memory available now, bytes.
        device_type: "cpu", "cuda" or "mps": where the model trains.
        local_processes: training processes on this machine (torchrun's LOCAL_WORLD_SIZE);
            cores and RAM are shared equally between them.
        worker_ram_bytes: RAM budgeted per worker, bytes.
        ram_fraction: share of the available RAM all workers together may take.
        max_workers: upper bound per process.

    On CPU the workers take cores from the compute, so they get a quarter of the cores,
    at least 2 (measured on 2 cores, loader-bound: 2 workers with 1 thread 1.35x faster
    than none, a single worker 1.5x slower than none) and none with a single core. On an
    accelerator the main process mostly launches kernels, so all cores but its own go to
    workers. Both are capped by RAM and ``max_workers``.
    """
    processes = max(1, local_processes)
    share = max(1, cpu_cores // processes)
    by_ram = int(ram_available_bytes * ram_fraction / processes // max(1, worker_ram_bytes))
    if device_type == "cpu":
        by_cores = 0 if share < 2 else min(max(2, share // 4), max_workers)
        basis = f"CPU training on {share} cores: a quarter of them, at least 2"
    else:
        by_cores = min(share - 1, max_workers)
        basis = f"{device_type} training on {share} cores: all but the main process's"
    workers = min(by_cores, by_ram)
    if device_type == "cpu" and workers == 1:
        # A lone worker serialises loading behind one process and still steals a core:
        # measured slower than loading in the main process.
        workers = 0
    ram_gib = ram_available_bytes / GiB
    reason = f"{basis} ({by_cores}); RAM {ram_gib:.1f} GiB available allows {by_ram}"
    if processes > 1:
        reason += f"; shared by {processes} local processes"
    return workers, reason


def _local_processes(env: Environment) -> int:
    try:
        return max(1, int(env.dist_env.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def resolve_host(
    loader_cfg: LoaderConfig,
    cpu_cfg: CpuConfig,
    loader: Any,
    env: Environment,
    *,
    device: torch.device,
) -> tuple[LoaderSettings | None, int | None, dict[str, str]]:
    """Resolve the loader settings and the intra-op threads together (they share the cores).

    Returns (settings for :func:`rebuild_loader` or None when there is no DataLoader,
    intra-op threads or None to keep torch's, reasons keyed by every ``loader.*`` field
    and "cpu.threads").
    """
    device = torch.device(device)
    processes = _local_processes(env)
    reasons: dict[str, str] = {}
    settings: LoaderSettings | None = None
    if loader is None or not isinstance(loader, DataLoader):
        why = "no DataLoader given" if loader is None else (
            f"{type(loader).__name__} is not a torch DataLoader; left as is"
        )
        for key in LOADER_FIELDS:
            reasons[f"loader.{key}"] = why
        workers = 0 if loader is None else int(getattr(loader, "num_workers", 0) or 0)
    elif type(loader) is not DataLoader:
        settings = LoaderSettings.of(loader)
        why = (
            f"{type(loader).__name__} subclasses DataLoader with its own constructor, so it is "
            "not rebuilt; set its arguments yourself or pass a plain DataLoader"
        )
        for key in LOADER_FIELDS:
            reasons[f"loader.{key}"] = why
        workers = settings.num_workers
    else:
        settings = _resolve_loader(loader_cfg, loader, env, device, processes, reasons)
        workers = settings.num_workers
    threads, reasons["cpu.threads"] = resolve_threads(
        cpu_cfg, workers=workers, cpu_cores=env.cpu_cores, device=device, local_processes=processes
    )
    return settings, threads, reasons


def _resolve_loader(
    cfg: LoaderConfig,
    loader: DataLoader,
    env: Environment,
    device: torch.device,
    processes: int,
    reasons: dict[str, str],
) -> LoaderSettings:
    current = LoaderSettings.of(loader)

    if cfg.num_workers == "keep":
        workers, reasons["loader.num_workers"] = current.num_workers, "keep: the loader's own value"
    elif isinstance(cfg.num_workers, int):
        workers, reasons["loader.num_workers"] = cfg.num_workers, "set in config"
        if isinstance(loader.dataset, IterableDataset) and workers > 1:
            reasons["loader.num_workers"] += (
                " (IterableDataset: each worker replays the stream unless the dataset shards "
                "itself with torch.utils.data.get_worker_info())"
            )
    elif isinstance(loader.dataset, IterableDataset):
        workers = current.num_workers
        reasons["loader.num_workers"] = (
            "IterableDataset: kept, since extra workers would each replay an unsharded stream; "
            "set loader.num_workers to a number to change it"
        )
    else:
        workers, reasons["loader.num_workers"] = auto_num_workers(
            cpu_cores=env.cpu_cores,
            ram_available_bytes=env.ram_available_bytes,
            device_type=device.type,
            local_processes=processes,
        )
        load_ms = measure_batch_load_ms(loader.dataset, loader.batch_size) if workers else None
        if load_ms is not None and load_ms < CHEAP_BATCH_MS:
            workers = 0
            reasons["loader.num_workers"] = (
                f"a batch loads in {load_ms:.2f} ms in the main process (< {CHEAP_BATCH_MS:g} ms): "
                "workers would cost more in transfer and cores than they save"
            )
        batches = _len_or_none(loader)
        if batches is not None and workers > batches:
            workers = batches
            reasons["loader.num_workers"] += f"; only {batches} batches per epoch"

    if cfg.pin_memory == "keep":
        pin, reasons["loader.pin_memory"] = current.pin_memory, "keep: the loader's own value"
    elif isinstance(cfg.pin_memory, bool):
        pin, reasons["loader.pin_memory"] = cfg.pin_memory, "set in config"
        if pin and device.type != "cuda":
            reasons["loader.pin_memory"] += f" (no effect: batches go to {device.type}, not CUDA)"
    else:
        pin = device.type == "cuda"
        reasons["loader.pin_memory"] = (
            "batches go to CUDA: pinned memory allows asynchronous copies"
            if pin
            else f"batches go to {device.type}: pinning only helps copies to CUDA"
        )

    persistent = _resolve_persistent(cfg.persistent_workers, current, workers, reasons)
    prefetch = _resolve_prefetch(cfg.prefetch_factor, current, workers, reasons)
    sharing = _resolve_sharing(cfg.sharing_strategy, current, workers, reasons)
    return LoaderSettings(
        num_workers=workers, pin_memory=pin, persistent_workers=persistent, prefetch_factor=prefetch,
        sharing_strategy=sharing,
    )


def _resolve_persistent(
    value: Any, current: LoaderSettings, workers: int, reasons: dict[str, str]
) -> bool:
    key = "loader.persistent_workers"
    if workers == 0:
        wanted = current.persistent_workers if value == "keep" else value
        reasons[key] = "no workers: persistent_workers needs num_workers > 0"
        if wanted is True:
            reasons[key] = "ignored: persistent_workers needs num_workers > 0"
        return False
    if value == "keep":
        reasons[key] = "keep: the loader's own value"
        return current.persistent_workers
    if isinstance(value, bool):
        reasons[key] = "set in config"
        return value
    reasons[key] = (
        f"{workers} workers: keeping them alive saves restarting them every epoch "
        "(a shuffle's later epochs then start from another generator state)"
    )
    return True


def _resolve_prefetch(
    value: Any, current: LoaderSettings, workers: int, reasons: dict[str, str]
) -> int | None:
    key = "loader.prefetch_factor"
    if workers == 0:
        reasons[key] = "no workers: prefetch_factor needs num_workers > 0"
        if isinstance(value, int):
            reasons[key] = "ignored: prefetch_factor needs num_workers > 0"
        return None
    if isinstance(value, int):
        reasons[key] = "set in config"
        return value
    if current.prefetch_factor is not None:
        reasons[key] = "keep: the loader's own value" if value == "keep" else "the loader's own value"
        return current.prefetch_factor
    reasons[key] = f"torch's default ({DEFAULT_PREFETCH}) for a loader that had no workers"
    return DEFAULT_PREFETCH


def _resolve_sharing(value: str, current: LoaderSettings, workers: int, reasons: dict[str, str]) -> str | None:
    key = "loader.sharing_strategy"
    if workers == 0:
        reasons[key] = "no workers: batches do not cross processes"
        return None
    if value == "keep":
        reasons[key] = "keep: the loader's own value"
        return current.sharing_strategy
    if value == "auto":
        reasons[key] = (
            "torch's default; file_system hands batches over without a socket round trip per "
            "tensor (faster with busy CPU workers), and `torchboost tune` measures it"
        )
        return current.sharing_strategy
    if not sharing_available(value):
        reasons[key] = f"{value} is not available on this platform; torch's default kept"
        return current.sharing_strategy
    reasons[key] = "set in config"
    return value


def _len_or_none(loader: DataLoader) -> int | None:
    if isinstance(loader.dataset, IterableDataset):
        return None
    try:
        return len(loader)
    except TypeError:
        return None


@functools.lru_cache(maxsize=1)
def _init_parameters() -> frozenset[str]:
    return frozenset(inspect.signature(DataLoader.__init__).parameters)


def rebuild_loader(loader: DataLoader, settings: LoaderSettings) -> DataLoader:
    """A DataLoader like ``loader`` with ``settings``; ``loader`` itself when nothing changes.

    The new loader shares the dataset, sampler (and so its generator and order),
    batch_sampler, collate_fn, drop_last, generator, worker_init_fn (wrapped to set the
    sharing strategy first, when one is chosen), timeout, multiprocessing_context and
    in_order, so it yields the same batches in the same order.
    One exception, torch's own: a loader whose persistent_workers differs draws its
    workers' base seed from the generator (or the global RNG) only once instead of every
    epoch, so from the second epoch a shuffle continues from a different generator state
    (still seeded and reproducible). Random augmentations run in workers are seeded by
    that base seed, so changing num_workers changes their random stream as well.
    ``loader`` must be a plain DataLoader: a subclass's constructor is unknown.
    """
    if LoaderSettings.of(loader) == settings:
        return loader
    if type(loader) is not DataLoader:
        raise TypeError(
            f"cannot rebuild a {type(loader).__name__} (a DataLoader subclass with its own "
            'constructor); set loader options to "keep" or build it with the settings yourself'
        )
    kwargs: dict[str, Any] = dict(
        dataset=loader.dataset,
        collate_fn=loader.collate_fn,
        timeout=loader.timeout,
        worker_init_fn=with_sharing(loader.worker_init_fn, settings.sharing_strategy),
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,  # also seeds the workers' base seed, drawn per epoch
        num_workers=settings.num_workers,
        pin_memory=settings.pin_memory,
        persistent_workers=settings.persistent_workers,
        prefetch_factor=settings.prefetch_factor,
    )
    if isinstance(loader.dataset, IterableDataset):
        # Its sampler is an internal infinite one that the constructor refuses back.
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is not None:
        # batch_size=B made the BatchSampler from loader.sampler; passing the same sampler
        # (which holds the generator) lets the constructor make an identical one and keeps
        # .batch_size and .drop_last what the user set.
        kwargs.update(sampler=loader.sampler, batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_sampler is not None:
        kwargs.update(batch_sampler=loader.batch_sampler)  # the user's own batch sampler
    else:
        kwargs.update(sampler=loader.sampler, batch_size=None)  # no automatic batching
    for name in ("in_order", "pin_memory_device"):
        value = getattr(loader, name, None)
        if name in _init_parameters() and value not in (None, ""):
            kwargs[name] = value
    return DataLoader(**kwargs)
