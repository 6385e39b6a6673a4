"""Where loading a batch goes: waiting off the CPU, computing on it, waiting for a core, the hand-over.

The observer times each batch where it is made (:mod:`torchboost.reach.sample_clock`: the
training process with no workers, else each worker) and the facts carry the sums
(:attr:`~torchboost.evidence.observed.LoaderFacts.samples`), read here as a
:class:`SampleSplit`. A loader whose samples mostly wait off the CPU (a read from slow
storage or a network share) is helped by more workers than there are cores: a waiting
worker takes no core, so ``cores / (1 - off-CPU share)`` workers still leave the cores
unoversubscribed. One that computes (decode, augment) is not: its workers stay within
the cores. :func:`off_cpu_workers` makes that count once, for the doctor's rule
(:func:`~torchboost.techniques.loader.loader_diagnosis.data_workers`) and tune's
candidates (:mod:`~torchboost.techniques.loader.loader_tuning`) alike.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from torchboost.evidence.observed import Facts, LoaderFacts
from torchboost.evidence.steps import measured_steps, typical_steps
from torchboost.techniques.loader.loader_settings import MAX_WORKERS

__all__ = ["MIN_TIMED_BATCHES", "MOST_OFF_CPU_WORKERS", "OFF_CPU_SHARE", "OffCpuWorkers", "SampleSplit",
           "dataless_step_ms", "off_cpu_workers"]

OFF_CPU_SHARE = 0.5
"""The share of a batch's making spent off the CPU from which workers past the cores are
proposed: below it the samples compute more than they wait, and each extra worker would
take a core from the others."""
MOST_OFF_CPU_WORKERS = 2 * MAX_WORKERS
"""The most workers proposed past the cores, per training process: each holds a copy of the
dataset object and its prefetched batches, and storage serves only so many reads at once."""
MIN_TIMED_BATCHES = 3
"""Batches timed before their split is read (the first may open files, warm caches)."""


@dataclass(frozen=True)
class SampleSplit:
    """A loader's batches timed where they were made, summed over the observed run."""

    batches: int = 0
    samples: int = 0
    wall_ms: float = 0.0
    """Wall time making them (the samples read and collated), ms, summed."""
    cpu_ms: float = 0.0
    """CPU time of the thread making them, ms, summed."""
    queued_ms: float = 0.0
    """Time the making thread was ready but waited for a core other processes held, ms, summed."""
    worker_batches: int = 0
    """Of :attr:`batches`, those made in worker processes."""

    @classmethod
    def of(cls, loader: LoaderFacts | None) -> "SampleSplit | None":
        """The split of ``loader``'s timed batches; None when fewer than
        :data:`MIN_TIMED_BATCHES` were timed (not timed: a spawned worker, an older report)."""
        raw = dict(loader.samples) if loader is not None else {}
        split = cls(**{k: raw[k] for k in ("batches", "samples", "wall_ms", "cpu_ms", "queued_ms",
                                            "worker_batches") if k in raw})
        return split if split.batches >= MIN_TIMED_BATCHES and split.wall_ms > 0 else None

    @property
    def off_cpu_ms(self) -> float:
        """Wall time neither on a CPU nor waiting for one, ms, summed: storage, a network, a lock."""
        return max(0.0, self.wall_ms - self.cpu_ms - self.queued_ms)

    @property
    def off_cpu_share(self) -> float:
        """:attr:`off_cpu_ms` over itself and the CPU time, 0..1: the share of each sample's own
        time spent off the CPU, the time other processes held the cores left out (on a busy
        machine a sample that computes waits for a core too, and one that sleeps waits to be
        woken: neither is the loader's own)."""
        own = self.off_cpu_ms + self.cpu_ms
        return self.off_cpu_ms / own if own > 0 else 0.0

    def per_batch(self, total_ms: float) -> float:
        """``total_ms`` (one of the sums) per batch, ms."""
        return total_ms / self.batches

    def words(self) -> str:
        """Which it is, in words: "waits off the CPU 95% of each sample's time: storage or
        network, not compute" or "computes on the CPU 90% of ...: decode or augment"."""
        off = self.off_cpu_share
        on = 1.0 - off
        if off >= OFF_CPU_SHARE:
            return (f"the loader waits off the CPU {off * 100:.0f}% of each sample's time: storage or network, "
                    "not compute")
        return f"the loader computes on the CPU {on * 100:.0f}% of each sample's time: decode or augment, not storage"


@dataclass(frozen=True)
class OffCpuWorkers:
    """Workers past the cores for a loader that waits off the CPU, and what sized them."""

    workers: int
    split: SampleSplit
    load_ms: float
    """One process's time to load a batch, ms: the training process's data wait with no
    workers, else the workers' own time per batch."""
    dataless_ms: float
    """A step with no loader work, ms (the replay's, else the step less its data wait)."""
    why: str
    """What bounds :attr:`workers`, in words ("at most 16 past the cores")."""


def dataless_step_ms(facts: Facts) -> float | None:
    """A step with no loader work, ms: the least of two measures of it, the median replay
    step where the doctor replayed (three steps, slowed by anything beside them) and the
    median typical step less its median wait for data (slowed where the step's maths runs
    cold after a long wait); None without steps."""
    replay = [ms for ms in facts.replay_step_ms if ms > 0 and math.isfinite(ms)]
    steps = typical_steps(measured_steps(facts)) if facts.steps else []
    measures = [statistics.median(replay)] if replay else []
    if steps:
        measures.append(max(0.0, statistics.median(s.total_ms for s in steps) - statistics.median(s.data_ms for s in steps)))
    return min(measures) if measures else None


def off_cpu_workers(facts: Facts, *, cores: int, step_ms: float, data_ms: float,
                    off_cpu_share: float = OFF_CPU_SHARE) -> OffCpuWorkers | None:
    """Workers for ``facts``' loader, whose timed batches waited off the CPU ``off_cpu_share``
    of their making or more, counted past the cores: ``cores / (1 - share)`` (their time on
    a CPU fills the cores), no more than make a batch's load as short as the step without
    it, nor than the epoch's batches, nor :data:`MOST_OFF_CPU_WORKERS`. None where the split
    was not timed, the samples compute, or that count is no more than the loader's own.
    ``step_ms`` and ``data_ms``: the step and its wait for data, ms."""
    loader = facts.loader
    split = SampleSplit.of(loader)
    if loader is None or split is None or split.off_cpu_share < off_cpu_share or cores < 1:
        return None
    if loader.num_workers and split.worker_batches:
        load = split.per_batch(split.wall_ms) * max(1, round(facts.micro_steps_per_step or 1))
    elif loader.num_workers:
        load = loader.num_workers * step_ms  # data-bound with workers: each makes one batch a step
    else:
        load = data_ms
    dataless = dataless_step_ms(facts)
    dataless = step_ms - data_ms if dataless is None else dataless
    on_cpu = max(1.0 - split.off_cpu_share, 1e-6)
    bounds = [(math.ceil(cores / on_cpu), f"{cores} cores over the {on_cpu:.2f} of a sample's time on a CPU"),
              (math.ceil(load / dataless) if dataless > 0 else MOST_OFF_CPU_WORKERS,
               f"a batch's {load:.1f} ms load over the {dataless:.1f} ms step without it"),
              (loader.num_batches or MOST_OFF_CPU_WORKERS, f"the epoch's {loader.num_batches} batches"),
              (MOST_OFF_CPU_WORKERS, f"at most {MOST_OFF_CPU_WORKERS} past the cores")]
    workers, why = min(bounds, key=lambda bound: bound[0])
    if workers <= loader.num_workers:
        return None
    return OffCpuWorkers(workers=workers, split=split, load_ms=load, dataless_ms=dataless, why=why)
