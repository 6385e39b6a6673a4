"""The tuner's loader levers: what they propose, the doctor's facts they read, and the bound
the doctor's measurements put on each candidate.

Workers and intra-op threads share the cores, so the host lever moves them together. Its
candidates are screened lowest bound first (:func:`host_floor`): a step with ``w`` workers
cannot take less than one batch's load time over ``w`` (the doctor timed that load in the
training process), nor, at torch's own thread count, less than a step with no loader work
at all (the doctor's replay of batches already seen). The search screens a sibling only
while that bound leaves it room to beat the configuration kept so far.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from torchboost.config import Overlay
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import view
from torchboost.evidence.steps import measured_steps, typical_steps
from torchboost.techniques.loader.host_threads import CpuConfig
from torchboost.techniques.loader.loader_settings import MAX_WORKERS, LoaderConfig
from torchboost.techniques.loader.sample_split import off_cpu_workers
from torchboost.techniques.loader.worker_ipc import available as sharing_available
from torchboost.techniques.registry import TuneContext

__all__ = ["TRIED_WORKERS", "LoaderTuning", "host_candidates", "host_floor", "loader_tune_context", "past_the_cores",
           "pin_candidates", "prefetch_candidates", "sharing_candidates", "threads_alone", "workers_of"]

TRIED_WORKERS = MAX_WORKERS // 2
"""The most loader workers the tuner tries within the cores: each count is screened with two
thread counts and two hand-overs at most, and the bound of each (:func:`host_floor`) screens
the likeliest first. A loader the doctor timed waiting off the CPU is tried past them
(:func:`past_the_cores`)."""


def workers_of(settings: Overlay) -> int:
    """Loader workers a candidate (or the settings kept) asks for; 0: none, or not set."""
    return int(settings.value(LoaderConfig, "num_workers", 0) or 0)


def host_candidates(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    """Fewer intra-op threads alone, then each worker count with threads = the cores left
    over and with all cores, each with torch's hand-over, then file_system's (with busy
    workers 7-13% faster a step in ``benchmarks/RESULTS.md``, "Worker batch hand-over";
    torch's own first, as it leaves no shared-memory file behind a killed run); for a loader
    the doctor timed waiting off the CPU, worker counts past the cores too
    (:func:`past_the_cores`), with all cores' threads."""
    # Workers and intra-op threads share the cores: on a 2-core box, 2 workers with
    # 2 threads gained nothing and 1 worker with 2 threads lost 50%, while 2 workers with
    # 1 thread gained 1.35x. Fewer threads alone is a candidate too: on a busy or small box,
    # intra-op threads that spin-wait for each other can cost more than they bring.
    out = [Overlay.of(CpuConfig, threads=t) for t in sorted({1, ctx.cpu_cores // 2}) if 0 < t < ctx.cpu_cores]
    loader = ctx.own(LoaderTuning)
    if not ctx.has_loader or loader.iterable_dataset or loader.workers_refused:
        return out
    file_system = Overlay.of(LoaderConfig, sharing_strategy="file_system")
    sharings = [Overlay()] + ([file_system] if loader.file_system_sharing else [])
    for workers in range(1, min(TRIED_WORKERS, max(ctx.cpu_cores, 1)) + 1):
        for threads in sorted({max(1, ctx.cpu_cores - workers), ctx.cpu_cores}):
            for sharing in sharings:
                out.append(Overlay.of(LoaderConfig, num_workers=workers, persistent_workers=True)
                           | Overlay.of(CpuConfig, threads=threads) | sharing)
    # Past the cores only where the doctor timed the samples waiting off the CPU: those
    # workers wait rather than compute, so the training process keeps every core's thread.
    for workers in past_the_cores(loader.off_cpu_workers, ctx.cpu_cores):
        for sharing in sharings:
            out.append(Overlay.of(LoaderConfig, num_workers=workers, persistent_workers=True)
                       | Overlay.of(CpuConfig, threads=max(ctx.cpu_cores, 1)) | sharing)
    return out


def past_the_cores(most: int, cores: int) -> list[int]:
    """Worker counts for a loader that waits off the CPU, past those tried within the cores
    (``min(TRIED_WORKERS, cores)``) up to ``most`` (the doctor's count): ``most`` itself and
    the doubles of the cores below it. The search screens them lowest bound first: ``most``
    first."""
    cores, tried = max(cores, 1), min(TRIED_WORKERS, max(cores, 1))
    counts, workers = {most}, 2 * cores
    while workers < most:
        counts.add(workers)
        workers *= 2
    return sorted(w for w in counts if w > tried)


def threads_alone(change: Overlay) -> bool:
    """``change`` sets the intra-op threads and nothing else: a switch between two steps
    (the cpu technique's quick probe), where workers need a new loader."""
    return set(change) == {f"{CpuConfig.section}.threads"}


def host_floor(change: Overlay, ctx: TuneContext) -> tuple[float, str] | None:
    """The least step time ``change`` could reach, ms, and why, from the doctor's run (None
    when it did not measure what bounds it: workers already loading, no loader)."""
    loader = ctx.own(LoaderTuning)
    load = loader.batch_load_ms
    if load is None:
        return None
    workers = workers_of(change)
    threads = change.value(CpuConfig, "threads", None)
    dataless = loader.dataless_step_ms
    # Fewer threads than the doctor's may step faster (threads that spin-wait on a busy
    # box): only a step at its own thread count or more is bound by its dataless step.
    same_threads = dataless is not None and isinstance(threads, int) and threads >= loader.dataless_threads > 0
    loading = load / workers if workers else load
    said = (f"loading a batch took {load:.1f} ms in the training process" +
            (f": {loading:.1f} ms over {workers} worker{'s' if workers > 1 else ''}" if workers else
             ", before each step, with no worker"))
    if workers and same_threads and dataless > loading:  # type: ignore[operator]
        return dataless, f"{said}, and a step with no loader work took {dataless:.1f} ms at {threads} threads"
    return loading, said


def prefetch_candidates(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    """A deeper prefetch queue, once workers are kept."""
    return [Overlay.of(LoaderConfig, prefetch_factor=4)] if workers_of(incumbent) else []


def sharing_candidates(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    """file_system hand-over, once workers are kept without it."""
    # With busy CPU workers, torch's default hand-over (a file descriptor fetched over a
    # socket from a worker thread that needs the worker's GIL) stalls the training loop;
    # on 2 cores file_system was 7-13% faster per step with 2 workers (benchmarks/worker_ipc.py,
    # recorded in benchmarks/RESULTS.md, "Worker batch hand-over").
    if not workers_of(incumbent) or not ctx.own(LoaderTuning).file_system_sharing:
        return []
    if incumbent.value(LoaderConfig, "sharing_strategy") == "file_system":  # kept with the workers
        return []
    return [Overlay.of(LoaderConfig, sharing_strategy="file_system")]


def pin_candidates(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    """Pinned host memory, for batches that go to a GPU."""
    return [Overlay.of(LoaderConfig, pin_memory=True)] if ctx.device == "cuda" and ctx.has_loader else []


@dataclass(frozen=True)
class LoaderTuning:
    """What the tuner's loader levers know of the script's loader and this platform."""

    iterable_dataset: bool = False
    """The script's loader reads an IterableDataset."""
    workers_refused: bool = False
    """Loader workers cannot start for the script's loader here (spawn and a dataset that
    does not pickle, or no ``__main__`` guard)."""
    file_system_sharing: bool = True
    """The platform offers torch's file_system sharing strategy for worker batches."""
    batch_load_ms: float | None = None
    """Milliseconds the doctor's run waited for a batch that its training process loaded
    itself (no loader workers): what one worker takes to load it; None: not known (no
    loader, or workers already loading)."""
    dataless_step_ms: float | None = None
    """A step with no loader work at torch's own thread count (``dataless_threads``), ms:
    the doctor's replay of batches already seen, else the step less its wait for data;
    None: not known."""
    dataless_threads: int = 0
    """The intra-op threads the doctor's run stepped with (0: not known)."""
    off_cpu_workers: int = 0
    """Workers the doctor counted for a loader whose samples it timed waiting off the CPU
    (storage, a network): past the cores where that share allows
    (:func:`~torchboost.techniques.loader.sample_split.off_cpu_workers`); 0: none (not
    timed, or the samples compute)."""


def loader_tune_context(facts: Facts) -> LoaderTuning:
    """The loader's tuning facts from the doctor's: the hand-over this platform offers
    (trials run here), the kind of dataset, and what bounds the host lever's candidates (a
    batch's load time when the training process loaded it, the dataless step)."""
    seen = LoaderTuning(iterable_dataset=bool(facts.loader and facts.loader.iterable),
                        workers_refused=bool(facts.loader and facts.loader.workers_refused),
                        file_system_sharing=sharing_available("file_system"), off_cpu_workers=_off_cpu(facts))
    steps = typical_steps(measured_steps(facts)) if facts.steps else []
    if facts.loader is None or facts.loader.num_workers or not steps:
        return seen
    load = statistics.median(s.data_ms for s in steps)
    step = statistics.median(s.total_ms for s in steps)
    replay = [ms for ms in facts.replay_step_ms if ms > 0 and math.isfinite(ms)]
    dataless = statistics.median(replay) if replay else max(step - load, 0.0)
    return dataclasses.replace(seen, batch_load_ms=load, dataless_step_ms=dataless or None,
                               dataless_threads=int(facts.cpu_threads or 0))


def _off_cpu(facts: Facts) -> int:
    """The doctor's worker count for a loader that waits off the CPU; 0 where there is none."""
    v = view(facts) if facts.steps else None
    if v is None or v.step_ms <= 0:
        return 0
    off = off_cpu_workers(facts, cores=v.cores, step_ms=v.step_ms, data_ms=v.ms["data"])
    return off.workers if off is not None else 0
