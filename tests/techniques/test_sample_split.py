"""A loader that waits off the CPU told from one that computes: the samples' clock, the rule, tune's counts.

The clock (:mod:`torchboost.reach.sample_clock`) times each batch where it is made; the
doctor's ``data.workers`` proposes workers past the cores only where the samples waited off
the CPU, and tune's host lever tries such counts only then. Each with its twin: a dataset
that spins the CPU for the same wall time as one that sleeps.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from torchboost.config import Overlay
from torchboost.evidence.observed import Facts, LoaderFacts, StepRecord
from torchboost.frameworks import fix_toml
from torchboost.reach import sample_clock
from torchboost.reach.loader_patch import timed_iteration
from torchboost.techniques.loader import LoaderConfig
from torchboost.techniques.loader.loader_diagnosis import data_workers
from torchboost.techniques.loader.loader_tuning import (LoaderTuning, host_candidates, loader_tune_context,
                                                       past_the_cores, workers_of)
from torchboost.techniques.loader.sample_split import MOST_OFF_CPU_WORKERS, SampleSplit
from torchboost.techniques.registry import TuneContext

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

WAIT_S = 0.002


class _Sleeps(Dataset):
    """Each sample waits ``WAIT_S`` off the CPU, as a read from slow storage does."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(WAIT_S)
        return torch.full((4,), float(i))


class _Spins(_Sleeps):
    """The twin: each sample computes on the CPU for the same wall time (a decode)."""

    def __getitem__(self, i: int) -> torch.Tensor:
        start = time.thread_time()
        while time.thread_time() - start < WAIT_S:  # CPU time, so a busy machine cannot shorten the work
            pass
        return torch.full((4,), float(i))


class _Observer:
    def loader_iter(self, loader, iterator):
        self.facts = LoaderFacts(num_workers=loader.num_workers)
        sample_clock.latest().described(self.facts, loader)

    def data_begin(self):
        pass

    def loader_batch(self, iterator, ms):
        pass


def _timed(dataset: Dataset, workers: int) -> SampleSplit | None:
    observer = _Observer()
    patch = timed_iteration(observer).install()
    try:
        batches = list(DataLoader(dataset, batch_size=8, num_workers=workers))
    finally:
        patch.uninstall()
    assert len(batches) == 6 and torch.equal(batches[1][0], torch.full((4,), 8.0))  # the batches as without it
    samples = sample_clock.latest().samples_of(observer.facts)
    return SampleSplit.of(LoaderFacts(samples=samples))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_that_sleeps_is_timed_off_the_cpu_where_its_samples_are_made(workers):
    split = _timed(_Sleeps(), workers)
    assert split is not None and split.batches == 6 and split.samples == 48
    assert split.worker_batches == (6 if workers else 0)  # the workers' own times came back
    assert split.wall_ms >= 48 * WAIT_S * 1000 * 0.9
    assert split.off_cpu_share > 0.5 and "storage or network" in split.words()


@pytest.mark.parametrize("workers", [0, 2])
def test_twin_a_dataset_that_spins_for_the_same_time_is_timed_on_the_cpu(workers):
    split = _timed(_Spins(), workers)
    assert split is not None and split.worker_batches == (6 if workers else 0)
    # Time a busy machine kept it from a core is waiting, not storage.
    assert split.off_cpu_share < 0.5 and "decode or augment" in split.words()


def _recorded(dataset: Dataset, tmp_path) -> Facts:
    """A loop observed as the doctor observes one (its recorder and loader patch), stopped
    after its recorded steps; the facts the recorder builds."""
    from torchboost.observe import ObserveSpec, StepRecorder, StopObserving

    rec = StepRecorder(ObserveSpec(out_dir=str(tmp_path), steps=4, warmup=1, profile_active=0))
    patch = timed_iteration(rec).install()
    try:
        for batch in DataLoader(dataset, batch_size=4):
            batch.sum()
            rec.backward_done()
    except StopObserving:
        pass
    finally:
        patch.uninstall()
    return rec.facts()


def test_the_recorded_facts_carry_the_training_loader_s_split(tmp_path):
    facts = _recorded(_Sleeps(), tmp_path)
    split = SampleSplit.of(facts.loader)
    assert split is not None and split.batches >= 5 and split.samples == 4 * split.batches
    assert split.off_cpu_share > 0.5
    assert SampleSplit.of(Facts.from_dict(facts.to_dict()).loader) == split  # through facts.json
    assert SampleSplit.of(LoaderFacts()) is None  # twin: a loader not timed has no split


# -- the rule and tune's counts, on hand-made facts ----------------------------------------------

def _facts(*, off_cpu_ms: float, cores: int = 2, workers: int = 0) -> Facts:
    """A CPU run on ``cores`` cores loading 32 samples in the training process: 143 ms steps,
    138 of them waiting for data, replayed at 1.5 ms; each batch's 138 ms, ``off_cpu_ms`` off
    the CPU and the rest on it."""
    steps = [StepRecord(i, 143.0, data_ms=138.0, forward_ms=3.0, backward_ms=1.5, optimizer_ms=0.5)
             for i in range(5, 25)]
    samples = {"batches": 25, "samples": 800, "wall_ms": 25 * 137.0, "cpu_ms": 25 * (137.0 - off_cpu_ms),
               "queued_ms": 0.0, "worker_batches": 0}
    return Facts(env={"device": "cpu", "cpu_cores": cores}, steps=steps, warmup_steps=5,
                 loader=LoaderFacts(num_workers=workers, batch_size=32, num_batches=300, samples=samples),
                 replay_step_ms=[1.5, 1.4, 1.6], cpu_threads=cores)


def test_data_workers_past_the_cores_where_the_loader_waits_off_the_cpu():
    f = data_workers(_facts(off_cpu_ms=130.0))
    assert f is not None and f.id == "data.workers"
    assert "waits off the CPU 95% of each sample's time: storage or network, not compute" in f.title
    assert f.evidence["suggested_num_workers"] == MOST_OFF_CPU_WORKERS == 16  # 2 / 0.05 = 40, capped
    assert f.fix.value(LoaderConfig, "num_workers") == 16
    assert "num_workers = 16" in fix_toml(f) and 'threads = "keep"' in fix_toml(f)
    # T / max(C + Pc / n, P / w) = 143 / max(1.5 + 7.05 / 2, 138 / 16) = 143 / 8.625
    assert f.expected_speedup == pytest.approx(143.0 / (138.0 / 16), rel=1e-3)
    assert f.evidence["sample_off_cpu_pct"] == pytest.approx(94.9, abs=0.1)
    assert f.evidence["batch_handover_ms"] == pytest.approx(1.0)  # 138 ms waited, 137 made


def test_twin_data_workers_stays_within_the_cores_where_the_loader_computes():
    f = data_workers(_facts(off_cpu_ms=7.0))
    assert f is not None and "computes on the CPU 95% of each sample's time: decode or augment" in f.title
    assert f.evidence["suggested_num_workers"] == 1  # the cores' rule: a CPU run on 2 cores
    assert "num_workers = 1" in fix_toml(f) and "threads" not in fix_toml(f)


def test_the_off_cpu_count_is_bounded_by_the_share_and_the_epoch():
    half = data_workers(_facts(off_cpu_ms=0.6 * 137.0))  # 2 cores / 0.4 on the CPU = 5 workers
    assert half.evidence["suggested_num_workers"] == 5
    short = _facts(off_cpu_ms=130.0)
    short.loader.num_batches = 6  # an epoch of 6 batches keeps no more than 6 workers busy
    assert data_workers(short).evidence["suggested_num_workers"] == 6
    unsplit = _facts(off_cpu_ms=130.0)
    unsplit.loader.samples = {}  # not timed (an older report, a spawned worker): the cores' rule
    assert data_workers(unsplit).evidence["suggested_num_workers"] == 1


def _candidates(facts: Facts) -> list[int]:
    ctx = TuneContext(cpu_cores=2, has_loader=True, tuning=(loader_tune_context(facts),))
    return sorted({workers_of(c) for c in host_candidates(Overlay(), ctx)} - {0})


def test_tune_tries_workers_past_the_cores_where_the_doctor_timed_the_loader_off_the_cpu():
    facts = _facts(off_cpu_ms=130.0)
    assert loader_tune_context(facts).off_cpu_workers == 16
    assert _candidates(facts) == [1, 2, 4, 8, 16]
    assert past_the_cores(16, 2) == [4, 8, 16] and past_the_cores(3, 2) == [3] and past_the_cores(16, 16) == [16]


def test_twin_tune_keeps_to_the_cores_where_the_loader_computes():
    facts = _facts(off_cpu_ms=7.0)
    assert loader_tune_context(facts).off_cpu_workers == 0
    assert _candidates(facts) == [1, 2]
    assert past_the_cores(0, 2) == [] and past_the_cores(2, 2) == []
    assert LoaderTuning().off_cpu_workers == 0  # no doctor's facts: nothing past the cores
