"""The loader's diagnoses: the step waits for data, pageable copies, workers restarted each epoch.

Each rule reads Facts only and returns a Finding or None; thresholds are keyword
parameters with their unit in the name. The loader technique declares them
(:data:`torchboost.techniques.loader.TECHNIQUE`); the doctor runs them with the rest.
"""

from __future__ import annotations

import statistics

from torchboost.config import KEEP, Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import per_step_ms, r, view
from torchboost.evidence.steps import measured_steps, summarize, typical_steps
from torchboost.techniques.loader.host_threads import CpuConfig
from torchboost.techniques.loader.loader_settings import LoaderConfig
from torchboost.techniques.loader.sample_split import OFF_CPU_SHARE, OffCpuWorkers, SampleSplit, off_cpu_workers

__all__ = ["data_persistent_workers", "data_pin_memory", "data_workers"]

# A pinned host buffer copies at roughly twice the bandwidth of a pageable one and can
# overlap compute with non_blocking=True (assumed factor).
_PINNED_COPY_FACTOR = 2.0
# Without a profiled copy time, the share of the data wait assumed to be the host copy.
_COPY_SHARE_OF_DATA = 0.1


_SHARD_NOTE = ("IterableDataset: each worker runs its own copy of the stream. Shard it with "
               "torch.utils.data.get_worker_info() or every sample is seen once per worker.")


def _suggested_workers(device: str, cores: int) -> int:
    # On an accelerator the cores are free for loading; on a CPU run they also do the maths.
    if device == "cpu":
        return max(1, min(4, cores // 4))
    return max(1, min(8, cores - 1))


def data_workers(facts: Facts, *, data_wait_pct: float = 20.0, off_cpu_pct: float = 100 * OFF_CPU_SHARE
                 ) -> Finding | None:
    """The step waits on the DataLoader for at least ``data_wait_pct`` percent of its time
    and more worker processes would load batches in parallel: up to the cores there are,
    or past them where the loader's samples waited off the CPU (storage, a network) for at
    least ``off_cpu_pct`` percent of their making (:mod:`~torchboost.techniques.loader.sample_split`);
    never where workers cannot start (``LoaderFacts.workers_refused``: spawn's workers and
    a dataset that does not pickle, or a script with no ``__main__`` guard)."""
    loader, v = facts.loader, view(facts)
    if loader is None or v.step_ms <= 0 or v.share["data"] * 100 < data_wait_pct or v.cores < 2:
        return None
    if loader.workers_refused:  # workers would break the run here
        return None
    workers = _suggested_workers(v.device, v.cores)
    off = off_cpu_workers(facts, cores=v.cores, step_ms=v.step_ms, data_ms=v.ms["data"],
                          off_cpu_share=off_cpu_pct / 100)
    if off is not None and off.workers > workers:
        return _past_the_cores(facts, off)
    if loader.num_workers >= workers:
        return None
    t, d = v.step_ms, v.ms["data"]
    compute = t - d
    # ms one process takes to make a batch: the main process's wait, or, with workers already
    # running and the step data-bound, workers x step time.
    per_batch = d if loader.num_workers == 0 else loader.num_workers * t
    new_t = max(compute, per_batch / workers)
    speedup = t / new_t if new_t > 0 else float(workers)
    if speedup <= 1.0:
        return None
    split = SampleSplit.of(loader)
    source = "D, loading in the main process" if loader.num_workers == 0 else f"{loader.num_workers} workers x T"
    return Finding(
        id="data.workers",
        title=f"The step waits for data {v.share['data'] * 100:.0f}% of the time; "
              + (f"{split.words()}; " if split is not None else "")
              + f"load batches in {workers} worker process{'' if workers == 1 else 'es'}",
        evidence={
            "data_wait_pct": r(v.share["data"] * 100, 1),
            "data_ms_per_step": r(d),
            "step_ms": r(t),
            "num_workers": loader.num_workers,
            "suggested_num_workers": workers,
            "cpu_cores": v.cores,
            "dataset": "iterable" if loader.iterable else "map-style",
            **_split_evidence(facts, split),
        },
        fix=Overlay.of(LoaderConfig, num_workers=workers),
        expected_speedup=speedup,
        formula=f"T / max(T - D, P / w) = {t:.2f} / max({compute:.2f}, {per_batch:.2f} / {workers}) "
                f"= {speedup:.3f}; T step ms, D data wait ms, P ms per batch for one process "
                f"(= {source}), w workers",
        notes=_worker_notes(facts, v.device),
    )


def _worker_notes(facts: Facts, device: str) -> list[str]:
    notes = ["More workers use more RAM (each holds a copy of the dataset object) and add start-up time."]
    if facts.loader is not None and facts.loader.iterable:
        notes.insert(0, _SHARD_NOTE)
    if device == "cpu":  # the workers and the training process share the cores
        notes.append('On a CPU the workers take cores from the training process: leave [cpu] threads at '
                     '"auto" (the default), which gives the training process the cores the workers leave.')
    return notes


def _split_evidence(facts: Facts, split: SampleSplit | None) -> dict[str, float | int | str]:
    """Each timed batch's making, split: off the CPU, on it, waiting for a core, and (loaded
    in the training process) the rest of the loop's wait for it, the hand-over."""
    if split is None:
        return {}
    out: dict[str, float | int | str] = {
        "sample_off_cpu_pct": r(split.off_cpu_share * 100, 1),
        "batch_off_cpu_ms": r(split.per_batch(split.off_cpu_ms)),
        "batch_on_cpu_ms": r(split.per_batch(split.cpu_ms)),
        "batch_core_wait_ms": r(split.per_batch(split.queued_ms)),
        "timed_batches": split.batches,
        "timed_in": "workers" if split.worker_batches else "the training process",
    }
    steps = typical_steps(measured_steps(facts)) if facts.steps else []
    if steps and not split.worker_batches:
        per_step = max(1, round(facts.micro_steps_per_step or 1))
        wait = statistics.median(s.data_ms for s in steps) / per_step
        out["batch_handover_ms"] = r(max(0.0, wait - split.per_batch(split.wall_ms)))
    return out


def _past_the_cores(facts: Facts, off: OffCpuWorkers) -> Finding:
    """``data.workers`` for a loader that waits off the CPU: ``off.workers``, past the cores
    where its off-CPU share allows."""
    loader, v, split, w = facts.loader, view(facts), off.split, off.workers
    t, d, load, c = v.step_ms, v.ms["data"], off.load_ms, off.dataless_ms
    on_cpu = load * split.cpu_ms / split.wall_ms  # of one batch's load, ms on a CPU
    # On a CPU device the workers' time on a CPU shares the cores with the training's maths.
    floor, floor_words = ((c + on_cpu / v.cores, f"C + Pc / n = {c:.2f} + {on_cpu:.2f} / {v.cores}")
                          if v.device == "cpu" else (max(c, on_cpu / max(1, v.cores - 1)), f"C = {c:.2f}"))
    new_t = max(floor, load / w)
    speedup = t / new_t if new_t > 0 else float(w)
    source = ("D, loading in the training process" if not loader.num_workers else  # type: ignore[union-attr]
              "the workers' time per batch" if split.worker_batches else f"{loader.num_workers} workers x T")
    dataless = "the least of the replay's median step and T - D" if facts.replay_step_ms else "T - D"
    return Finding(
        id="data.workers",
        title=f"The step waits for data {v.share['data'] * 100:.0f}% of the time; {split.words()}; "
              f"load batches in {w} worker processes",
        evidence={"data_wait_pct": r(v.share["data"] * 100, 1), "data_ms_per_step": r(d), "step_ms": r(t),
                  "num_workers": loader.num_workers, "suggested_num_workers": w,  # type: ignore[union-attr]
                  "cpu_cores": v.cores, "dataset": "iterable" if loader.iterable else "map-style",  # type: ignore[union-attr]
                  "dataless_step_ms": r(c), **_split_evidence(facts, split)},
        fix=Overlay.of(LoaderConfig, num_workers=w) | (Overlay.of(CpuConfig, threads=KEEP) if v.device == "cpu"
                                                       else Overlay()),
        expected_speedup=speedup,
        formula=f"T / max({floor_words}, P / w) = {t:.2f} / max({floor:.2f}, {load:.2f} / {w}) = {speedup:.3f}; "
                f"T step ms, C step ms with no loader work ({dataless}), P ms per batch for one process "
                f"(= {source}), Pc its ms on a CPU (the timed share {split.cpu_ms / split.wall_ms:.3f} of P), "
                "n cores, w workers",
        notes=_off_cpu_notes(off, cores=v.cores, device=v.device, iterable=loader.iterable),  # type: ignore[union-attr]
    )


def _off_cpu_notes(off: OffCpuWorkers, *, cores: int, device: str, iterable: bool) -> list[str]:
    split, w = off.split, off.workers
    notes = [f"Timed where each batch was made ({split.batches} batches, "
             f"{'in the workers' if split.worker_batches else 'in the training process'}): of its "
             f"{split.per_batch(split.wall_ms):.1f} ms, {split.per_batch(split.off_cpu_ms):.1f} ms off the CPU, "
             f"{split.per_batch(split.cpu_ms):.1f} ms on it and {split.per_batch(split.queued_ms):.1f} ms waiting "
             f"for a core other processes held. A worker that waits takes no core: {w} workers ({off.why}).",
             "This assumes the storage serves that many reads at once as fast as one; a throttled disk's "
             "bandwidth or a server's rate limit gives less: `torchboost tune` measures it end to end.",
             "More workers use more RAM (each holds a copy of the dataset object and its prefetched batches) "
             "and add start-up time."]
    if w > cores:
        notes.insert(2, f"PyTorch warns that {w} workers exceed its suggested maximum ({cores}, the cores): "
                        "these mostly wait.")
    if iterable:
        notes.insert(0, _SHARD_NOTE)
    if device == "cpu":
        notes.append('The workers wait rather than compute, so the training process keeps its intra-op threads '
                     '([cpu] threads = "keep"), where "auto" would leave it the cores the workers seem to take.')
    return notes


def _is_pageable_h2d(name: str) -> bool:
    return "HtoD" in name and "Pinned" not in name


def data_pin_memory(
    facts: Facts, *, h2d_copy_pct: float = 1.0, data_wait_pct: float = 20.0
) -> Finding | None:
    """Batches go to a CUDA device from pageable memory: pinned memory copies faster and lets
    the copy overlap compute. Fires when profiled host-to-device copies take at least
    ``h2d_copy_pct`` percent of the step, or, with no profiled copy, the data wait is at
    least ``data_wait_pct`` percent."""
    loader, v = facts.loader, view(facts)
    if v.device != "cuda" or loader is None or loader.pin_memory or v.step_ms <= 0:
        return None
    copy_ms = per_step_ms(facts.profile, _is_pageable_h2d, key="self_device_ms")
    evidence: dict[str, float | int | str] = {"step_ms": r(v.step_ms), "pin_memory": "false"}
    notes = ["Pin only when batches go to a GPU; pinned pages are locked host RAM."]
    if copy_ms is not None:
        share = copy_ms / v.step_ms
        if share * 100 < h2d_copy_pct:
            return None
        evidence.update(h2d_copy_ms_per_step=r(copy_ms), h2d_copy_pct=r(share * 100, 1))
        formula_share = f"c = {copy_ms:.2f} / {v.step_ms:.2f} ms (profiled pageable HtoD copies)"
    else:
        if v.share["data"] * 100 < data_wait_pct:
            return None
        share = v.share["data"] * _COPY_SHARE_OF_DATA
        evidence.update(data_wait_pct=r(v.share["data"] * 100, 1))
        formula_share = f"c = {_COPY_SHARE_OF_DATA} x data share {v.share['data']:.3f} (copy not profiled; assumed)"
        notes.append("The copy time was not profiled; the estimate assumes it is a tenth of the data wait.")
    speedup = 1.0 / (1.0 - share + share / _PINNED_COPY_FACTOR)
    return Finding(
        id="data.pin_memory",
        title="Batches are copied to the GPU from pageable memory; pin them",
        evidence=evidence,
        fix=Overlay.of(LoaderConfig, pin_memory=True),
        expected_speedup=speedup,
        formula=f"1 / (1 - c + c / {_PINNED_COPY_FACTOR}) = {speedup:.3f}; {formula_share}; "
                f"pinned copies ~{_PINNED_COPY_FACTOR}x faster (assumed)",
        notes=notes,
    )


def data_persistent_workers(facts: Facts, *, worker_restart_pct: float = 1.0) -> Finding | None:
    """Loader workers are shut down and restarted every epoch; the restart, seen as the extra
    data wait on an epoch's first batch, costs at least ``worker_restart_pct`` percent of an epoch."""
    loader, v = facts.loader, view(facts)
    if loader is None or loader.num_workers == 0 or loader.persistent_workers or v.step_ms <= 0:
        return None
    per_epoch = loader.num_batches
    if not per_epoch or (facts.planned_steps is not None and facts.planned_steps <= per_epoch):
        return None  # one epoch (or unknown length): workers start once either way
    starts = [s.data_ms for s in facts.steps if s.index % per_epoch == 0]
    rest = [s.data_ms for s in measured_steps(facts) if s.index % per_epoch != 0]
    if not starts or not rest:
        return None
    steady = statistics.median(rest)
    restart = sum(starts) / len(starts) - steady
    # The median step leaves the restart spikes out, so they are not counted twice.
    step_ms = summarize(facts).step_time_ms["median"] or v.step_ms
    epoch_ms = per_epoch * step_ms
    if restart <= 0 or 100 * restart / epoch_ms < worker_restart_pct:
        return None
    speedup = (epoch_ms + restart) / epoch_ms
    return Finding(
        id="data.persistent_workers",
        title=f"{loader.num_workers} loader workers restart every epoch (~{restart:.0f} ms each time); keep them alive",
        evidence={
            "num_workers": loader.num_workers,
            "epoch_start_data_ms": r(sum(starts) / len(starts)),
            "steady_data_ms": r(steady),
            "restart_ms": r(restart),
            "batches_per_epoch": per_epoch,
            "median_step_ms": r(step_ms),
        },
        fix=Overlay.of(LoaderConfig, persistent_workers=True),
        expected_speedup=speedup,
        formula=f"(N T + R) / (N T) = ({per_epoch} x {step_ms:.2f} + {restart:.2f}) / "
                f"({per_epoch} x {step_ms:.2f}) = {speedup:.3f}; N batches per epoch, "
                "T median step ms, R restart ms (first-batch data wait minus the median)",
        notes=["Persistent workers keep their dataset copy and RAM between epochs."],
    )
