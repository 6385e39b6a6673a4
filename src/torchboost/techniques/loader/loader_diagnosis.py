"""The loader's diagnoses: the step waits for data, pageable copies, workers restarted each epoch.

Each rule reads Facts only and returns a Finding or None; thresholds are keyword
parameters with their unit in the name. The loader technique declares them
(:data:`torchboost.techniques.loader.TECHNIQUE`); the doctor runs them with the rest.
"""

from __future__ import annotations

import statistics

from torchboost.config import Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import per_step_ms, r, view
from torchboost.evidence.steps import measured_steps, summarize
from torchboost.techniques.loader.loader_settings import LoaderConfig

__all__ = ["data_persistent_workers", "data_pin_memory", "data_workers"]

# A pinned host buffer copies at roughly twice the bandwidth of a pageable one and can
# overlap compute with non_blocking=True (assumed factor).
_PINNED_COPY_FACTOR = 2.0
# Without a profiled copy time, the share of the data wait assumed to be the host copy.
_COPY_SHARE_OF_DATA = 0.1


def _suggested_workers(device: str, cores: int) -> int:
    # On an accelerator the cores are free for loading; on a CPU run they also do the maths.
    if device == "cpu":
        return max(1, min(4, cores // 4))
    return max(1, min(8, cores - 1))


def data_workers(facts: Facts, *, data_wait_pct: float = 20.0) -> Finding | None:
    """The step waits on the DataLoader for at least ``data_wait_pct`` percent of its time
    and more worker processes (up to the cores there are) would load batches in parallel;
    never where workers cannot start (``LoaderFacts.workers_refused``: spawn's workers and
    a dataset that does not pickle, or a script with no ``__main__`` guard)."""
    loader, v = facts.loader, view(facts)
    if loader is None or v.step_ms <= 0 or v.share["data"] * 100 < data_wait_pct or v.cores < 2:
        return None
    workers = _suggested_workers(v.device, v.cores)
    if loader.num_workers >= workers or loader.workers_refused:  # workers would break the run here
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
    notes = ["More workers use more RAM (each holds a copy of the dataset object) and add start-up time."]
    if loader.iterable:
        notes.insert(0, "IterableDataset: each worker runs its own copy of the stream. Shard it with "
                        "torch.utils.data.get_worker_info() or every sample is seen once per worker.")
    if v.device == "cpu":  # the workers and the training process share the cores
        notes.append('On a CPU the workers take cores from the training process: leave [cpu] threads at '
                     '"auto" (the default), which gives the training process the cores the workers leave.')
    source = "D, loading in the main process" if loader.num_workers == 0 else f"{loader.num_workers} workers x T"
    return Finding(
        id="data.workers",
        title=f"The step waits for data {v.share['data'] * 100:.0f}% of the time; "
              f"load batches in {workers} worker process{'' if workers == 1 else 'es'}",
        evidence={
            "data_wait_pct": r(v.share["data"] * 100, 1),
            "data_ms_per_step": r(d),
            "step_ms": r(t),
            "num_workers": loader.num_workers,
            "suggested_num_workers": workers,
            "cpu_cores": v.cores,
            "dataset": "iterable" if loader.iterable else "map-style",
        },
        fix=Overlay.of(LoaderConfig, num_workers=workers),
        expected_speedup=speedup,
        formula=f"T / max(T - D, P / w) = {t:.2f} / max({compute:.2f}, {per_batch:.2f} / {workers}) "
                f"= {speedup:.3f}; T step ms, D data wait ms, P ms per batch for one process "
                f"(= {source}), w workers",
        notes=notes,
    )


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
