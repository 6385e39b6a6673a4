"""Each batch's samples timed where they are made: wall time against CPU time, per loader.

The observer's DataLoader patch (:func:`torchboost.reach.loader_patch.timed_iteration`)
wraps the dataset fetchers' ``fetch`` (``torch.utils.data._utils.fetch``: one call reads a
batch's samples and collates them) with :meth:`SampleClock.timed`. Each call adds, to its
loader's sums, its wall time, the fetching thread's own CPU time and the time that thread
was ready to run but waited for a core other processes held: one read of Linux's
``/proc/thread-self/schedstat`` gives both (elsewhere ``time.thread_time`` and no wait).
The wall time neither covers is time the samples waited off the CPU (storage, a
network); the CPU time computed on it (decode, augment, collate). The doctor compares
them (:mod:`torchboost.techniques.loader.sample_split`): on a busy machine a sample that
computes also waits for a core, which is no wait for storage. The thread's own clock,
not the process's: the observer's and torch's other threads run meanwhile (the process's
clock read twice the thread's on a loop of sleeping samples). A sample that computes on
intra-op threads still counts on the CPU for the calling thread's part of each parallel
region, and for the time it spins at its end.

The fetcher runs in the training process when the loader has no workers, else in each
worker process. The sums are kept in an anonymous shared memory map made when the patch
is installed, so a worker forked afterwards (the default on Linux) adds its batches to
the same table, in a slot of its own (its loader's, by its worker id), and the training
process reads them there. A worker started by spawn or forkserver imports torch anew,
without the patch: its batches are not timed.

Four clock reads and a few additions per batch: about 10 microseconds, against batches
that take milliseconds to read or decode (``benchmarks/sample_clock_cost.py``).
"""

from __future__ import annotations

import functools
import mmap
import os
import threading
import time
from typing import Any, Callable

from torch.utils.data import get_worker_info
from torch.utils.data._utils import fetch as _fetch

__all__ = ["FETCH_ATTRIBUTES", "LOADERS", "WORKER_SLOTS", "SampleClock", "latest"]

FETCH_ATTRIBUTES: tuple[tuple[type, str], ...] = ((_fetch._MapDatasetFetcher, "fetch"),
                                                  (_fetch._IterableDatasetFetcher, "fetch"))
"""(class, attribute) pairs :meth:`SampleClock.timed` wraps."""

LOADERS = 8
"""Loaders timed per process (the first ones iterated); a ninth is not timed."""
WORKER_SLOTS = 64
"""Workers timed per loader (worker ids from 0); a worker of a higher id is not timed."""
_FIELDS = ("batches", "samples", "wall_s", "cpu_s", "queued_s")
_SLOT = len(_FIELDS)
_PER_LOADER = (1 + WORKER_SLOTS) * _SLOT  # the training process's slot, then one per worker
_SCHEDSTAT = "/proc/thread-self/schedstat"
"""The calling thread's nanoseconds on a CPU (what ``time.thread_time`` reads), waiting on a
run queue, and its time slices."""

_latest: "SampleClock | None" = None


def latest() -> "SampleClock | None":
    """The clock most recently put into a fetcher (it stays readable after the patch is
    taken off, until the next is put in), or None."""
    return _latest


class SampleClock:
    """Sums of each loader's fetches: batches, samples, wall, CPU and run-queue seconds, per process."""

    def __init__(self) -> None:
        # Anonymous and shared: a forked worker writes into the pages the training process reads.
        self._table = mmap.mmap(-1, LOADERS * _PER_LOADER * 8)
        self._sums = memoryview(self._table).cast("d")
        self._loaders: dict[int, int] = {}  # id(loader) -> its index in the table
        self._iterators: dict[int, int] = {}  # id(iterator) -> its loader's index
        self._described: dict[int, int] = {}  # id(LoaderFacts) -> the described loader's index
        self._current = -1  # the loader whose batches are being made: a forked worker keeps its loader's

    def iterating(self, loader: Any) -> None:
        """``loader`` is about to make an iterator (and, first, maybe start its workers, which
        then time their fetches as its)."""
        index = self._loaders.get(id(loader))
        if index is None and len(self._loaders) < LOADERS:
            index = self._loaders[id(loader)] = len(self._loaders)
        self._current = -1 if index is None else index

    def made(self, loader: Any, iterator: Any) -> None:
        """``loader`` made ``iterator``: batches fetched through it in this process are its."""
        self._iterators[id(iterator)] = self._loaders.get(id(loader), -1)

    def fetching(self, iterator: Any) -> None:
        """The training process asks ``iterator`` for a batch (a loader with no workers makes it now)."""
        self._current = self._iterators.get(id(iterator), -1)

    def described(self, facts: Any, loader: Any) -> None:
        """``facts`` (a :class:`~torchboost.evidence.observed.LoaderFacts`) describe ``loader``:
        :meth:`samples_of` them is that loader's sums."""
        if id(loader) in self._loaders:
            self._described[id(facts)] = self._loaders[id(loader)]

    def timed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` (a fetcher's ``fetch``) adding each call's times to the loader it works for."""
        global _latest
        _latest = self
        sums, clock, thread_clock = self._sums, time.perf_counter, _THREAD_CLOCK

        @functools.wraps(original)
        def fetch(fetcher: Any, possibly_batched_index: Any) -> Any:
            slot = self._slot()
            if slot < 0:
                return original(fetcher, possibly_batched_index)
            (cpu, waited), wall = thread_clock(), clock()
            batch = original(fetcher, possibly_batched_index)
            wall = clock() - wall
            cpu_now, waited_now = thread_clock()
            waited = min(wall, max(0.0, waited_now - waited))
            sums[slot] += 1
            sums[slot + 1] += len(possibly_batched_index) if getattr(fetcher, "auto_collation", False) else 1
            sums[slot + 2] += wall
            sums[slot + 3] += min(wall - waited, max(0.0, cpu_now - cpu))
            sums[slot + 4] += waited
            return batch

        return fetch

    def _slot(self) -> int:
        """The first of this process's sums for the loader at work; -1: not timed."""
        if self._current < 0:
            return -1
        worker = get_worker_info()
        if worker is None:
            return self._current * _PER_LOADER
        return -1 if worker.id >= WORKER_SLOTS else self._current * _PER_LOADER + (1 + worker.id) * _SLOT

    def samples_of(self, facts: Any) -> dict[str, float]:
        """The sums of the loader ``facts`` describe (see :meth:`described`): ``batches``,
        ``samples``, ``wall_ms``, ``cpu_ms``, ``queued_ms`` (waiting for a core),
        ``worker_batches``; {} when none was timed."""
        index = self._described.get(id(facts))
        if index is None:
            return {}
        base = index * _PER_LOADER
        slots = [self._sums[base + i * _SLOT: base + (i + 1) * _SLOT].tolist() for i in range(1 + WORKER_SLOTS)]
        batches = sum(s[0] for s in slots)
        if not batches:
            return {}
        return {"batches": int(batches), "samples": int(sum(s[1] for s in slots)),
                "wall_ms": round(1000 * sum(s[2] for s in slots), 3),
                "cpu_ms": round(1000 * sum(s[3] for s in slots), 3),
                "queued_ms": round(1000 * sum(s[4] for s in slots), 3),
                "worker_batches": int(sum(s[0] for s in slots[1:]))}


class _ThreadClock:
    """The calling thread's seconds on a CPU and waiting for one since it started: one read
    of its ``schedstat``, kept open per thread (and reopened in a forked child); where
    there is none, ``time.thread_time()`` and 0.0."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._missing = not os.path.exists(_SCHEDSTAT)

    def __call__(self) -> tuple[float, float]:
        if self._missing:
            return time.thread_time(), 0.0
        local = self._local
        if getattr(local, "forks", -1) != _forks:  # first call on this thread, or a forked child's copy of it
            try:
                local.fd, local.forks = os.open(_SCHEDSTAT, os.O_RDONLY), _forks
            except OSError:
                self._missing = True
                return time.thread_time(), 0.0
        try:
            on_cpu, queued = os.pread(local.fd, 64, 0).split()[:2]
            return int(on_cpu) / 1e9, int(queued) / 1e9
        except (OSError, ValueError):
            self._missing = True
            return time.thread_time(), 0.0


_forks = 0


def _forked() -> None:
    global _forks
    _forks += 1  # the thread's open schedstat, copied from the parent, is the parent's thread's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)

_THREAD_CLOCK = _ThreadClock()
"""One per process: each thread's schedstat opened once, whichever clock reads it."""
