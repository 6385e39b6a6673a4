"""How ``"auto"`` resolves the ``[loader]`` and ``[cpu]`` sections, together.

Loader workers and intra-op threads share the cores, so :func:`resolve_host` turns both
sections (``auto``/``keep``/values) into concrete :class:`LoaderSettings` and an intra-op
thread count, with a reason each.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from torchboost.env import Environment
from torchboost.techniques.loader.dataset_cost import CHEAP_BATCH_MS, measure_batch_load_ms
from torchboost.techniques.loader.host_threads import CpuConfig, resolve_threads
from torchboost.techniques.loader.loader_settings import (LOADER_FIELDS, MAX_WORKERS, LoaderConfig, LoaderSettings,
                                                         more_workers_refused)
from torchboost.techniques.loader.worker_ipc import available as sharing_available

__all__ = ["auto_num_workers", "resolve_host"]

GiB = 1024**3

WORKER_RAM_BYTES = 1 * GiB
"""RAM budgeted per loader worker, bytes: a forked worker touches (and so copies) the
Python objects of the dataset it reads, and holds ``prefetch_factor`` batches."""

RAM_FRACTION = 0.5
"""Share of the available RAM that ``auto`` lets loader workers take."""

DEFAULT_PREFETCH = 2
"""torch's own prefetch_factor when there are workers."""


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
    at least 2 (one run on 2 cores, loader-bound: 2 workers with 1 thread 1.35x faster
    than none, a single worker 1.5x slower than none; see
    :mod:`~torchboost.techniques.loader.host_threads`) and none with a single core. On an
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
        # slower than loading in the main process (host_threads' docstring: 127 ms against 84).
        workers = 0
    ram_gib = ram_available_bytes / GiB
    reason = f"{basis} ({by_cores}); RAM {ram_gib:.1f} GiB available allows {by_ram}"
    if processes > 1:
        reason += f"; shared by {processes} local processes"
    return workers, reason


def _local_processes(env: Environment) -> int:
    return env.local_world_size


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
    workers = _resolve_workers(cfg.num_workers, current, loader, env, device, processes, reasons,
                               declared=cfg.shards_by_worker)
    pin = _resolve_pin(cfg.pin_memory, current, device, reasons)
    persistent = _resolve_persistent(cfg.persistent_workers, current, workers, reasons)
    prefetch = _resolve_prefetch(cfg.prefetch_factor, current, workers, reasons)
    sharing = _resolve_sharing(cfg.sharing_strategy, current, workers, reasons)
    return LoaderSettings(
        num_workers=workers, pin_memory=pin, persistent_workers=persistent, prefetch_factor=prefetch,
        sharing_strategy=sharing,
    )


def _resolve_workers(
    value: Any, current: LoaderSettings, loader: DataLoader, env: Environment, device: torch.device,
    processes: int, reasons: dict[str, str], *, declared: bool = False,
) -> int:
    if value == "keep":
        workers, reasons["loader.num_workers"] = current.num_workers, "keep: the loader's own value"
    elif (why := more_workers_refused(loader.dataset, value, current.num_workers, declared,
                                      loader=_spawn_arguments(loader))) is not None:
        workers = current.num_workers
        reasons["loader.num_workers"] = refusal = f"refused {value}, kept {workers}: {why}"
        warnings.warn(refusal, stacklevel=2)
    elif isinstance(value, int):
        workers, reasons["loader.num_workers"] = value, "set in config"
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
        refused = more_workers_refused(loader.dataset, workers, current.num_workers, loader=_spawn_arguments(loader))
        if refused is not None:
            workers, reasons["loader.num_workers"] = current.num_workers, f"kept {current.num_workers}: {refused}"
    return workers


def _spawn_arguments(loader: DataLoader) -> dict[str, Any]:
    """What a worker started by spawn gets of ``loader`` besides its dataset."""
    return {"multiprocessing_context": loader.multiprocessing_context, "collate_fn": loader.collate_fn,
            "worker_init_fn": loader.worker_init_fn}


def _resolve_pin(value: Any, current: LoaderSettings, device: torch.device, reasons: dict[str, str]) -> bool:
    if value == "keep":
        pin, reasons["loader.pin_memory"] = current.pin_memory, "keep: the loader's own value"
    elif isinstance(value, bool):
        pin, reasons["loader.pin_memory"] = value, "set in config"
        if pin and device.type != "cuda":
            reasons["loader.pin_memory"] += f" (no effect: batches go to {device.type}, not CUDA)"
    else:
        pin = device.type == "cuda"
        reasons["loader.pin_memory"] = (
            "batches go to CUDA: pinned memory allows asynchronous copies"
            if pin
            else f"batches go to {device.type}: pinning only helps copies to CUDA"
        )
    return pin


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
