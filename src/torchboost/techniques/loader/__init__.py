"""DataLoader tuning: worker processes, pinned memory, prefetching, and batches moved to the device.

The pieces, each usable on its own:

* :func:`resolve_host` (:mod:`~torchboost.techniques.loader.loader_auto`) turns ``[loader]``
  and ``[cpu]`` config into concrete :class:`LoaderSettings` and an intra-op thread count
  (the threads' own rule: :mod:`~torchboost.techniques.loader.host_threads`);
* :func:`rebuild_loader` (:mod:`~torchboost.techniques.loader.loader_settings`) builds a new
  DataLoader with those settings that yields the same batches in the same order;
* :class:`DeviceLoader` (:mod:`~torchboost.techniques.loader.batches`) wraps a loader so that
  iterating it yields batches already on the training device, and
  :class:`ResumableLoader` (:mod:`~torchboost.techniques.loader.resumable`) lets a run
  resume mid-epoch;
* how workers hand batches over: :mod:`~torchboost.techniques.loader.worker_ipc`; what a
  batch costs to load: :mod:`~torchboost.techniques.loader.dataset_cost`; the diagnosis:
  :mod:`~torchboost.techniques.loader.loader_diagnosis`.

This module declares the technique's descriptor (its ``[loader]`` section lives with
the settings it becomes, in :mod:`~torchboost.techniques.loader.loader_settings`), with the
tuner's levers for workers (moved together with the CPU threads they compete with),
the batch hand-over, pinned memory and prefetching.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from torchboost.config import AUTO, KEEP, Overlay
from torchboost.techniques._tensors import map_tensors
from torchboost.techniques.loader.batches import DeviceLoader, move_to_device
from torchboost.techniques.loader.host_threads import CpuConfig, apply_threads, auto_threads, resolve_threads
from torchboost.techniques.loader.loader_auto import auto_num_workers, resolve_host
from torchboost.techniques.loader.loader_diagnosis import data_persistent_workers, data_pin_memory, data_workers
from torchboost.techniques.loader.loader_settings import (LOADER_FIELDS, MAX_WORKERS, LoaderConfig, LoaderSettings,
                                                         more_workers_refused, rebuild_loader, shards_by_worker)
from torchboost.techniques.loader.loader_tuning import (TRIED_WORKERS, LoaderTuning, host_candidates, host_floor,
                                                       loader_tune_context, pin_candidates, prefetch_candidates,
                                                       sharing_candidates, threads_alone)
from torchboost.techniques.loader.resumable import ResumableLoader
from torchboost.techniques.loader.worker_ipc import with_sharing
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ResolveContext, Resolution, Rule, Technique,
)

__all__ = [
    "CpuConfig",
    "DeviceLoader",
    "LOADER_FIELDS",
    "LoaderConfig",
    "LoaderSettings",
    "LoaderTuning",
    "MAX_WORKERS",
    "ResumableLoader",
    "TECHNIQUE",
    "TRIED_WORKERS",
    "apply_threads",
    "auto_num_workers",
    "auto_threads",
    "map_tensors",
    "move_to_device",
    "rebuild_loader",
    "resolve_host",
    "resolve_threads",
    "shards_by_worker",
]

# -- resolve and apply ------------------------------------------------------------------

def _resolve(ctx: ResolveContext) -> Resolution:
    settings, threads, reasons = resolve_host(ctx.config.section(LoaderConfig), ctx.config.section(CpuConfig),
                                              ctx.loader, ctx.env, device=ctx.device)
    values = {key: KEEP for key in LOADER_FIELDS} if settings is None else {
        key: KEEP if getattr(settings, key) is None else getattr(settings, key) for key in LOADER_FIELDS}
    overlay = Overlay.of(LoaderConfig, **values) | Overlay.of(CpuConfig, threads=KEEP if threads is None else threads)
    return Resolution(overlay, reasons, detail=settings)


def _compose(transforms: list[Callable[[Any], Any]]) -> Callable[[Any], Any] | None:
    if not transforms:
        return None
    if len(transforms) == 1:
        return transforms[0]

    def transform(batch: Any) -> Any:
        for fn in transforms:
            batch = fn(batch)
        return batch

    return transform


def _apply(prep: Preparation) -> None:
    # After the shard (the rebuilt loader keeps the DistributedSampler) and after every
    # technique that converts batches (channels_last) has said so.
    if prep.loader is None:
        return
    settings = prep.details.get("loader")
    rebuilt = rebuild_loader(prep.loader, settings) if settings is not None else prep.loader
    pinned = bool(getattr(rebuilt, "pin_memory", False))
    prep.prepared_loader = ResumableLoader(
        DeviceLoader(rebuilt, prep.device, non_blocking=pinned, transform=_compose(prep.batch_transforms))
    )


def _nocode_arguments(values: dict[str, Any], arguments: dict[str, Any]) -> None:
    wanted = dict(values)
    sharing = wanted.pop("sharing_strategy", None)
    declared = bool(wanted.pop("shards_by_worker", False))
    workers = wanted.get("num_workers")
    why = more_workers_refused(arguments.get("dataset"), workers, int(arguments.get("num_workers", 0) or 0), declared,
                               loader=arguments)
    if why is not None:
        # More workers on an unsharded stream would each yield every sample, and workers
        # started by spawn would break on a dataset that does not pickle or an unguarded
        # script: the loader keeps its own worker settings, and says so (never "applied").
        for key in ("num_workers", "persistent_workers", "prefetch_factor"):
            wanted.pop(key, None)
        sharing = None
        print(f"torchboost: loader.num_workers={workers} not applied: {why}", file=sys.stderr)
    arguments.update(wanted)
    if int(arguments.get("num_workers", 0) or 0) == 0:
        # torch refuses these without workers
        arguments["persistent_workers"] = False
        arguments["prefetch_factor"] = None
    elif sharing is not None:
        arguments["worker_init_fn"] = with_sharing(arguments.get("worker_init_fn"), sharing)


def _nocode_in_effect(values: dict[str, Any], loaders: list[Any]) -> list[str]:
    # Each loader's own attributes, as built: one that kept its arguments (an unsharded
    # stream keeps its workers) shows what it holds instead.
    if not loaders:
        return [f"no DataLoader built by then ({_loader_words(values, None)} unused)"]
    said = [f"DataLoader {_loader_words(values, loader)}" for loader in loaders]
    return [f"{said.count(words)} x {words}" if said.count(words) > 1 else words for words in dict.fromkeys(said)]


def _loader_words(values: dict[str, Any], loader: Any) -> str:
    words = []
    for key, wanted in values.items():
        held = getattr(loader, key, wanted) if loader is not None else wanted
        if held != wanted and key in ("persistent_workers", "prefetch_factor") and not loader.num_workers:
            continue  # follows num_workers, said there
        words.append(f"{key}={held}" if held == wanted else f"{key}={held} (torchboost's {wanted} did not hold)")
    return ", ".join(words)


def _spell(section: LoaderConfig) -> FrameworkSpelling:
    args = [f"{key}={value!r}" for key, value in
            ((key, getattr(section, key)) for key in LOADER_FIELDS if key != "sharing_strategy")
            if value not in (AUTO, KEEP)]
    code = (f"loader = DataLoader(dataset, ..., {', '.join(args)})",) if args else ()
    if section.pin_memory is True:  # pinned pages pay only when the copy does not block
        code += ("x = x.to(device, non_blocking=True)",)
    transformers = {f"dataloader_{key}": getattr(section, key) for key in LOADER_FIELDS
                    if key != "sharing_strategy" and getattr(section, key) not in (AUTO, KEEP)}
    sharing = section.sharing_strategy
    unflagged = (() if sharing in (AUTO, KEEP) else
                 (f'torch.multiprocessing.set_sharing_strategy("{sharing}")  # before the loader starts workers',))
    return FrameworkSpelling(transformers=transformers, code=code, unflagged=unflagged)


TECHNIQUE = Technique(
    name="loader",
    title="DataLoader workers, pinned memory, prefetch",
    after=('distributed',),
    placed='the loader is rebuilt (workers, pinning, prefetch) once the process group has sharded it',
    section=LoaderConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(loader_arguments=_nocode_arguments, in_effect=_nocode_in_effect),
    levers=(
        Lever("host", "loader workers + CPU threads", Parity.EXACT, host_candidates,
              ("data.workers", "threads.oversubscribed", "threads.contended", "data.persistent_workers"),
              priority=10, coupled_with=("cpu",), fallback_parity=Parity.STATISTICAL, floor=host_floor,
              switchable=threads_alone),
        Lever("sharing", "worker batch hand-over (file_system)", Parity.EXACT, sharing_candidates,
              ("data.workers",), priority=20, fallback_parity=Parity.STATISTICAL),
        Lever("pin_memory", "pinned host memory", Parity.EXACT, pin_candidates, ("data.pin_memory",), priority=70),
        Lever("prefetch", "deeper prefetch", Parity.EXACT, prefetch_candidates, (), priority=80,
              fallback_parity=Parity.STATISTICAL),
    ),
    spell=_spell,
    tune_context=loader_tune_context,
    rules=(Rule("data.workers", data_workers), Rule("data.pin_memory", data_pin_memory),
           Rule("data.persistent_workers", data_persistent_workers)),
)
