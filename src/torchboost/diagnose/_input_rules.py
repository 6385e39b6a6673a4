"""Rules about feeding the step: loader workers, pinned memory, threads, syncs, memory.

Each rule reads Facts only and returns a Finding or None; thresholds are keyword
parameters with their unit in the name. Registered in :data:`torchboost.diagnose.rules.RULES`.
"""

from __future__ import annotations

import statistics
from typing import Any

from torchboost.diagnose._shared import per_step_ms, r, view
from torchboost.diagnose.facts import Facts
from torchboost.diagnose.finding import Finding
from torchboost.diagnose.summary import measured_steps, summarize

__all__ = [
    "data_workers",
    "data_pin_memory",
    "data_persistent_workers",
    "threads_oversubscribed",
    "sync_host_device",
    "memory_headroom",
]

# Device idle per sync while the host queues the next kernels again, when the profile
# does not time the syncs themselves: a few kernel launches' worth (assumed).
_SYNC_GAP_MS = 0.05
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
    and more worker processes (up to the cores there are) would load batches in parallel."""
    loader, v = facts.loader, view(facts)
    if loader is None or v.step_ms <= 0 or v.share["data"] * 100 < data_wait_pct or v.cores < 2:
        return None
    workers = _suggested_workers(v.device, v.cores)
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
    notes = ["More workers use more RAM (each holds a copy of the dataset object) and add start-up time."]
    if loader.iterable:
        notes.insert(0, "IterableDataset: each worker runs its own copy of the stream. Shard it with "
                        "torch.utils.data.get_worker_info() or every sample is seen once per worker.")
    fix_toml = f"[loader]\nnum_workers = {workers}"
    fix_torch = f"loader = DataLoader(dataset, batch_size=..., num_workers={workers})"
    if v.device == "cpu":
        fix_toml += '\n[cpu]\nthreads = "auto"'
        fix_torch += f"\ntorch.set_num_threads({max(1, v.cores - workers)})  # leave cores to the workers"
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
        fix_toml=fix_toml,
        fix_torch=fix_torch,
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
        fix_toml="[loader]\npin_memory = true",
        fix_torch="loader = DataLoader(dataset, ..., pin_memory=True)\n"
                  "x = x.to(device, non_blocking=True)",
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
        fix_toml="[loader]\npersistent_workers = true",
        fix_torch=f"loader = DataLoader(dataset, ..., num_workers={loader.num_workers}, persistent_workers=True)",
        expected_speedup=speedup,
        formula=f"(N T + R) / (N T) = ({per_epoch} x {step_ms:.2f} + {restart:.2f}) / "
                f"({per_epoch} x {step_ms:.2f}) = {speedup:.3f}; N batches per epoch, "
                "T median step ms, R restart ms (first-batch data wait minus the median)",
        notes=["Persistent workers keep their dataset copy and RAM between epochs."],
    )


def threads_oversubscribed(facts: Facts, *, oversubscription_ratio: float = 1.0) -> Finding | None:
    """On a CPU run, intra-op threads plus loader workers exceed the cores by more than
    ``oversubscription_ratio``: threads preempt each other and parallel regions stall."""
    v = view(facts)
    if v.device != "cpu" or v.cores < 1 or v.step_ms <= 0:
        return None
    workers = facts.loader.num_workers if facts.loader else 0
    threads = facts.cpu_threads
    ratio = (threads + workers) / v.cores
    if ratio <= oversubscription_ratio:
        return None
    new_workers = workers if workers < v.cores else v.cores // 2
    new_threads = max(1, v.cores - new_workers)
    if (new_threads, new_workers) == (threads, workers):
        return None
    compute = v.compute_share + v.share["optimizer"]
    slowdown = min(2.0, ratio)
    speedup = 1.0 / ((1.0 - compute) + compute / slowdown)
    if speedup <= 1.0:
        return None
    fix_toml = f"[cpu]\nthreads = {new_threads}"
    fix_torch = f"torch.set_num_threads({new_threads})"
    if new_workers != workers:
        fix_toml = f"[loader]\nnum_workers = {new_workers}\n" + fix_toml
        fix_torch = f"loader = DataLoader(dataset, ..., num_workers={new_workers})\n" + fix_torch
    return Finding(
        id="threads.oversubscribed",
        title=f"{threads} intra-op threads + {workers} loader workers on {v.cores} cores; "
              f"use {new_threads} threads",
        evidence={
            "cpu_threads": threads,
            "num_workers": workers,
            "cpu_cores": v.cores,
            "oversubscription_ratio": r(ratio, 2),
            "compute_pct": r(compute * 100, 1),
        },
        fix_toml=fix_toml,
        fix_torch=fix_torch,
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {compute:.3f} forward+backward+optimizer "
                f"share, s = min(2, (threads + workers) / cores) = {slowdown:.2f} "
                "(parallel regions slowed in proportion to oversubscription; assumed, capped at 2x)",
        notes=["Measure: the right split between threads and workers depends on the model and the data."],
    )


def _is_sync(name: str) -> bool:
    return "Synchronize" in name or name == "aten::_local_scalar_dense"


def sync_host_device(facts: Facts, *, sync_per_step: float = 1.0) -> Finding | None:
    """The host waits for the device at least ``sync_per_step`` times per step (``.item()``,
    ``.cpu()``, ``print(tensor)``, data-dependent shapes): the host cannot queue the next
    step's work while the device runs, so host time (data, Python) stops overlapping."""
    profile, v = facts.profile, view(facts)
    if v.device == "cpu" or profile is None or v.step_ms <= 0:
        return None  # on a CPU nothing runs asynchronously, so a sync costs nothing
    count = profile.sync_count_per_step
    if count < sync_per_step:
        return None
    host = v.ms["data"] + v.ms["other"]
    blocked = per_step_ms(profile, _is_sync)
    if blocked:
        saved = min(blocked, host)
        basis = f"min(B, H) = min({blocked:.2f}, {host:.2f}); B profiled ms blocked in syncs per step"
    else:
        saved = min(host, count * _SYNC_GAP_MS)
        basis = f"min(H, n x g) = min({host:.2f}, {count:g} x {_SYNC_GAP_MS}); g device idle per sync (assumed)"
    if saved <= 0:
        return None
    speedup = v.step_ms / (v.step_ms - saved)
    ops = ", ".join(f"{name} x{n}" for name, n in sorted(profile.sync_ops.items(), key=lambda kv: -kv[1])[:3])
    return Finding(
        id="sync.host_device",
        title=f"The host waits for the device {count:g} times per step; keep values on the device",
        evidence={
            "syncs_per_step": r(count, 2),
            "sync_ops": ops or "unknown",
            "host_ms_per_step": r(host),
            "step_ms": r(v.step_ms),
            **({"blocked_ms_per_step": r(blocked)} if blocked else {}),
        },
        fix_toml="# no torchboost.toml key: the syncs are in the training script",
        fix_torch="running_loss += loss.detach()  # stays on the device, no sync\n"
                  "if step % 100 == 0:\n    print(running_loss.item() / 100)  # one sync per 100 steps",
        expected_speedup=speedup,
        formula=f"T / (T - S) = {v.step_ms:.2f} / ({v.step_ms:.2f} - {saved:.2f}) = {speedup:.3f}; "
                f"S ms of host work (data + other, H) that could overlap device work = {basis}",
        notes=["Common sources: loss.item() every step, tensor.cpu()/.tolist(), bool(tensor) in an if, "
               "torch.nonzero and boolean-mask indexing."],
    )


def memory_headroom(facts: Facts, *, memory_used_pct: float = 50.0) -> Finding | None:
    """Peak memory is under ``memory_used_pct`` percent of the device (or RAM on a CPU run):
    a micro-batch k times larger fits. Under gradient accumulation over K micro-batches the
    neutral form keeps the global batch (micro-batch x k, accumulation K / k) and spreads
    each micro-step's fixed cost; without accumulation a larger batch changes what is
    trained, so the finding is marked so and its gain is per sample."""
    v = view(facts)
    if v.device == "cuda":
        peak, total, where = facts.peak_memory_bytes, facts.device_memory_total_bytes, "GPU memory"
    elif v.device == "cpu":
        peak, total, where = facts.peak_rss_bytes, int(facts.env.get("ram_bytes") or 0), "RAM"
    else:
        return None
    if peak <= 0 or total <= 0 or v.step_ms <= 0 or 100 * peak / total >= memory_used_pct:
        return None
    k = 1
    while k < 8 and peak * k * 2 <= 0.8 * total:  # all memory scaled with the batch: conservative
        k *= 2
    if k < 2:
        return None
    batch = facts.loader.batch_size if facts.loader else None
    evidence = {"peak_memory_bytes": peak, "memory_total_bytes": total, "memory_used_pct": r(100 * peak / total, 1),
                "batch_factor": k, "step_ms": r(v.step_ms), **({"batch_size": batch} if batch else {})}
    title = f"Peak {where} is {100 * peak / total:.0f}% of {total / 2**30:.1f} GiB"
    micro = int(facts.micro_steps_per_step or 1)
    if micro >= 2:
        return _headroom_neutral(v, facts, k, micro, batch, evidence, title)
    return _headroom_batch(v, k, batch, evidence, title)


def _headroom_neutral(v: Any, facts: Facts, k: int, micro: int, batch: int | None, evidence: dict,
                      title: str) -> Finding | None:
    while k > 1 and micro % k:
        k //= 2
    if k < 2:
        return None
    other = v.ms["other"]
    new_ms = v.step_ms - other + other / k
    speedup = v.step_ms / new_ms if new_ms > 0 else 1.0
    if speedup <= 1.0:
        return None
    target = f"batch_size={batch * k}" if batch else f"each micro-batch {k}x larger"
    toml = (f"[accumulation]\nsteps = {micro // k}  # and {target} in your DataLoader" if facts.uses_booster
            else f"# no torchboost.toml key: set {target} and accumulate over {micro // k} micro-batches")
    return Finding(
        id="memory.headroom",
        title=f"{title}; micro-batches {k}x larger over {micro // k} accumulation steps keep the global batch",
        evidence={**evidence, "batch_factor": k, "micro_steps_per_step": micro, "other_ms_per_step": r(other)},
        fix_toml=toml,
        fix_torch=f"loader = DataLoader(dataset, {target}, ...)  # and step every {micro // k} micro-batches",
        expected_speedup=speedup,
        formula=f"T / (T - O + O / k) = {v.step_ms:.2f} / ({v.step_ms - other:.2f} + {other:.2f} / {k}) = "
                f"{speedup:.3f}; O ms per step outside the phases, paid per micro-step, k = {k} "
                f"(divides the {micro} micro-steps; peak x k <= 80% of total)",
        notes=["The global batch and the optimisation are unchanged: the same samples per optimizer step."],
    )


def _headroom_batch(v: Any, k: int, batch: int | None, evidence: dict, title: str) -> Finding | None:
    fixed = v.ms["optimizer"] + v.ms["other"]
    new_per_sample = (v.step_ms - fixed) + fixed / k
    speedup = v.step_ms / new_per_sample if new_per_sample > 0 else 1.0
    if speedup <= 1.0:
        return None
    target = f"batch_size={batch * k}" if batch else f"a batch size {k}x the current one"
    return Finding(
        id="memory.headroom",
        title=f"{title}; a batch {k}x larger would take {speedup:.2f}x less time per sample",
        evidence={**evidence, "fixed_ms_per_step": r(fixed)},
        fix_toml=f"# no torchboost.toml key for the batch size: set {target} in your DataLoader",
        fix_torch=(f"loader = DataLoader(dataset, batch_size={batch * k}, ...)" if batch
                   else f"# build each batch {k}x larger where the script makes it"),
        expected_speedup=speedup,
        formula=f"time per sample T / (T - F + F / k) = {v.step_ms:.2f} / ({v.step_ms - fixed:.2f} + "
                f"{fixed:.2f} / {k}) = {speedup:.3f}; F fixed ms per step (optimizer + other), "
                f"k = {k} (peak x k <= 80% of total, assuming all memory grows with the batch)",
        notes=["A larger batch changes the optimisation (fewer, larger steps): scale the learning rate "
               "and check the loss curve; tune does not measure it.",
               "On a GPU, a small batch also leaves cores idle, so the real gain is often larger."],
        changes_training=True,
        unit="sample",
    )
