"""The ``[loader]`` section, the DataLoader arguments it becomes, and a loader rebuilt with them.

:func:`rebuild_loader` builds a new DataLoader with :class:`LoaderSettings` that yields
the same batches in the same order (same dataset, sampler, generator, collate_fn, ...).
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from torch.utils.data import DataLoader, IterableDataset

from torchboost.config import AUTO, KEEP, BoolOrWord, IntOrWord
from torchboost.config import check_bool_or_word, check_choice, check_int_or_word
from torchboost.techniques.loader.spawn_safety import spawn_refusal
from torchboost.techniques.loader.worker_ipc import sharing_of, with_sharing

__all__ = ["LOADER_FIELDS", "MAX_WORKERS", "LoaderConfig", "LoaderSettings", "more_workers_refused", "rebuild_loader",
           "shards_by_worker"]

MAX_WORKERS = 8
"""Loader workers per training process beyond which more rarely help one device: the most
``auto`` chooses (:func:`~torchboost.techniques.loader.loader_auto.auto_num_workers`),
and twice the most the tuner tries."""
_MOST_WORKERS_WRITTEN = max(64, MAX_WORKERS * (os.cpu_count() or 1))
"""The most workers ``torchboost.toml`` may ask for: more than :data:`MAX_WORKERS` per core
of this machine only thrash, so a value above it is a typo. Per core, and at least 64,
rather than the figure itself: a file tuned on a larger machine, or a user's own choice
beyond ``auto``'s, must still read here."""
LOADER_FIELDS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "sharing_strategy")
"""The ``[loader]`` fields, in the order of :class:`LoaderSettings`."""


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """DataLoader settings; ``keep`` leaves the user's value as it is."""

    section: ClassVar[str] = "loader"
    SHARING: ClassVar[tuple[str, ...]] = ("auto", "keep", "file_descriptor", "file_system")

    num_workers: IntOrWord = AUTO
    """auto | keep | worker processes (>= 0). auto is bounded by cores and RAM and never
    raises workers for an IterableDataset."""
    pin_memory: BoolOrWord = AUTO
    """auto (on when batches go to a CUDA device) | keep | true | false."""
    persistent_workers: BoolOrWord = AUTO
    """auto (on when there are workers) | keep | true | false."""
    prefetch_factor: IntOrWord = AUTO
    """auto | keep | batches prefetched per worker (>= 1)."""
    sharing_strategy: str = AUTO
    """auto (torch's default) | keep | file_descriptor | file_system: how workers hand
    batches over (see :mod:`torchboost.techniques.loader.worker_ipc`)."""
    shards_by_worker: bool = False
    """The loader's IterableDataset gives each worker its own part of the stream (through
    ``torch.utils.data.get_worker_info()``), so more workers may be started for it. Without
    it (or a dataset whose ``__iter__`` calls ``get_worker_info``, or one with a true
    ``shards_by_worker`` attribute) workers are never raised for an IterableDataset: each
    would yield every sample."""

    def __post_init__(self) -> None:
        check_int_or_word("loader.num_workers", self.num_workers, 0, (AUTO, KEEP), maximum=_MOST_WORKERS_WRITTEN)
        check_bool_or_word("loader.pin_memory", self.pin_memory, (AUTO, KEEP))
        check_bool_or_word("loader.persistent_workers", self.persistent_workers, (AUTO, KEEP))
        check_int_or_word("loader.prefetch_factor", self.prefetch_factor, 1, (AUTO, KEEP), maximum=1024)
        check_choice("loader.sharing_strategy", self.sharing_strategy, self.SHARING)
        check_bool_or_word("loader.shards_by_worker", self.shards_by_worker, ())

    @classmethod
    def off(cls) -> "LoaderConfig":
        """The loader as the script built it."""
        return cls(num_workers=KEEP, pin_memory=KEEP, persistent_workers=KEEP, prefetch_factor=KEEP,
                   sharing_strategy=KEEP)


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
    """How workers hand batches over (:mod:`~torchboost.techniques.loader.worker_ipc`); None:
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


@functools.lru_cache(maxsize=1)
def _init_parameters() -> frozenset[str]:
    return frozenset(inspect.signature(DataLoader.__init__).parameters)


def shards_by_worker(dataset: Any, declared: bool = False) -> bool:
    """Whether extra workers on ``dataset`` would each get their own samples: a map-style
    dataset always; an IterableDataset when ``declared`` (loader.shards_by_worker), when it
    says so itself (a true ``shards_by_worker`` attribute), or when its ``__iter__`` asks
    ``get_worker_info()``, the way torch's documentation shards a stream."""
    if not isinstance(dataset, IterableDataset):
        return True
    if declared or getattr(dataset, "shards_by_worker", False) is True:
        return True
    for cls in type(dataset).__mro__:
        method = cls.__dict__.get("__iter__")
        if method is None or cls.__module__.startswith("torch."):
            continue
        try:
            return "get_worker_info" in inspect.getsource(method)
        except (OSError, TypeError):
            return False
    return False


def more_workers_refused(dataset: Any, wanted: Any, current: int, declared: bool = False,
                         loader: Mapping[str, Any] | None = None) -> str | None:
    """Why ``wanted`` workers (more than the ``current`` ones) are refused on ``dataset``, in
    words: an IterableDataset that does not shard by worker (:func:`shards_by_worker`),
    where each worker would yield every sample; or, for a loader with no workers yet, workers
    that would start by spawn and break the run (:func:`spawn_refusal`, reading ``loader``'s
    ``multiprocessing_context``, ``collate_fn`` and ``worker_init_fn``). None when they may be had."""
    if not (isinstance(wanted, int) and wanted > current):
        return None
    if not shards_by_worker(dataset, declared):
        return (f"{type(dataset).__name__} is an IterableDataset that does not shard by worker (no get_worker_info() "
                "in its __iter__), so each worker would yield every sample; shard it, or set "
                "loader.shards_by_worker = true")
    loader = loader or {}
    return None if current else spawn_refusal(dataset, loader.get("multiprocessing_context"),
                                              collate_fn=loader.get("collate_fn"),
                                              worker_init_fn=loader.get("worker_init_fn"))


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
