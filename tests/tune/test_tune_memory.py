"""Peak memory in the search: over_memory rejections, memory levers, the default limit."""

from __future__ import annotations

import itertools

import pytest

from torchboost.diagnose import Facts, StepRecord
from torchboost.techniques.compile import CompileTuning
from torchboost.tune.search.levers import Lever, TuneContext, default_levers
from torchboost.tune.search.memory_limit import MEMORY_MARGIN, PEAK_SLACK, default_memory_limit, limit_source, size
from torchboost.tune.search.parity import EXACT
from torchboost.tune.search import SearchOptions, run_search
from torchboost.tune.trials.trial_result import TrialResult
from torchboost.tune.tuner import context_from_facts

GiB = 2**30
LOSSES = [2.0 - 0.05 * i for i in range(20)]
SMALL_16 = {"accumulation.micro_batch_size": 16}
SMALL_8 = {"accumulation.micro_batch_size": 8}
FUSED = {"optimizer.implementation": "fused"}


def _context(limit: int | None) -> TuneContext:
    # No loader and no compile: the optimizer and the memory lever are the only candidates.
    return TuneContext(device="cpu", cpu_cores=2, has_loader=False, memory_limit_bytes=limit,
                       tuning=(CompileTuning(can_compile=False),))


def _memory_lever() -> Lever:
    """A fake memory lever: smaller micro-batches, 16 then 8 samples."""
    return Lever("micro_batch", "smaller micro-batches", EXACT, lambda incumbent, ctx: [SMALL_16, SMALL_8],
                 for_memory=True)


class MemoryScript:
    """ms per step and peak memory by settings. The baseline: 100 ms, 10 GiB. Micro-batches
    of 16: 1.3x the time, 7 GiB; of 8: 1.6x, 5 GiB. The fused optimizer: 0.8x the time and
    ``fused_extra`` more memory."""

    def __init__(self, fused_extra: int = 0, noise: float = 0.01):
        self.fused_extra = fused_extra
        self.noise = itertools.cycle([1.0, 1.0 + noise, 1.0 - noise])
        self.calls: list[dict] = []

    def __call__(self, settings, repeat, **_):
        self.calls.append(dict(settings))
        ms, peak = 100.0, 10 * GiB
        micro = settings.get("accumulation.micro_batch_size")
        if micro == 16:
            ms, peak = ms * 1.3, 7 * GiB
        elif micro == 8:
            ms, peak = ms * 1.6, 5 * GiB
        if settings.get("optimizer.implementation") == "fused":
            ms, peak = ms * 0.8, peak + self.fused_extra
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[ms * next(self.noise)] * 5,
                           losses=list(LOSSES), samples_per_step=32, peak_memory_bytes=peak)


def _search(script, limit, levers=None):
    return run_search(levers if levers is not None else default_levers(), _context(limit), script, SearchOptions())


def _decision(outcome, settings):
    return next(d for d in outcome.decisions if dict(d.settings) == settings and d.status != "screened_out")


# -- over_memory -------------------------------------------------------------------------------

def test_a_faster_candidate_over_the_limit_is_rejected_as_over_memory():
    script = MemoryScript(fused_extra=2 * GiB)  # 12 GiB, against an 11 GiB limit
    outcome = _search(script, limit=11 * GiB)
    fused = _decision(outcome, FUSED)
    assert fused.status == "over_memory"
    assert fused.peak_memory_bytes == 12 * GiB
    assert "12.00 GiB, over the 11.00 GiB memory limit" in fused.reason
    assert "optimizer.implementation" not in outcome.settings  # 1.25x faster, and never kept
    assert outcome.memory_limit_bytes == 11 * GiB


def test_the_same_candidate_under_a_higher_limit_is_kept():
    """The twin: a limit above its peak, and the same 1.25x is kept."""
    outcome = _search(MemoryScript(fused_extra=2 * GiB), limit=13 * GiB)
    fused = _decision(outcome, FUSED)
    assert fused.status == "kept" and outcome.settings == FUSED
    assert fused.peak_memory_bytes == 12 * GiB
    assert outcome.waterfall[0].peak_memory_bytes == 10 * GiB
    assert outcome.waterfall[-1].peak_memory_bytes == 12 * GiB


def test_no_limit_and_no_measured_peak_reject_nothing():
    assert _search(MemoryScript(fused_extra=2 * GiB), limit=None).settings == FUSED

    class Unmeasured(MemoryScript):
        def __call__(self, settings, repeat, **_):
            result = super().__call__(settings, repeat)
            result.peak_memory_bytes = 0  # a measure that reports no memory
            return result

    outcome = _search(Unmeasured(), limit=GiB)
    assert outcome.settings == FUSED
    assert _decision(outcome, FUSED).peak_memory_bytes is None


# -- memory levers -------------------------------------------------------------------------------

def test_a_memory_lever_is_kept_when_the_baseline_is_over_the_limit():
    script = MemoryScript()
    outcome = _search(script, limit=8 * GiB, levers=[*default_levers(), _memory_lever()])
    lever = _decision(outcome, SMALL_16)
    assert lever.status == "kept" and lever.memory_lever
    assert lever.ratio == pytest.approx(1.3, rel=0.03)  # slower, and kept all the same
    assert "from 10.00 GiB to 7.00 GiB, under the 8.00 GiB memory limit" in lever.reason
    assert "costs 1.3" in lever.reason and "x the time per step" in lever.reason
    # tried before every other lever, right after the baseline's A/A runs
    first = next(s for s in script.calls if s)
    assert first == SMALL_16
    # the first one that fits is kept: 8-sample micro-batches are never run
    assert SMALL_8 not in [{k: v for k, v in s.items() if k == "accumulation.micro_batch_size"} for s in script.calls]
    assert outcome.settings["accumulation.micro_batch_size"] == 16
    assert outcome.settings["optimizer.implementation"] == "fused"  # other levers on top of it
    assert [w.label for w in outcome.waterfall][:2] == ["baseline", "+ smaller micro-batches"]
    assert outcome.waterfall[1].speedup == pytest.approx(1 / 1.3, rel=0.03)
    assert outcome.waterfall[1].peak_memory_bytes == 7 * GiB
    assert outcome.warnings == []


def test_a_memory_lever_is_skipped_when_nothing_is_over_the_limit():
    """The twin: the same lever, a limit above the baseline's peak."""
    script = MemoryScript()
    outcome = _search(script, limit=12 * GiB, levers=[*default_levers(), _memory_lever()])
    lever = next(d for d in outcome.decisions if d.lever == "micro_batch")
    assert lever.status == "skipped" and "nothing is over the memory limit" in lever.reason
    assert not any("accumulation.micro_batch_size" in s for s in script.calls)  # never run
    assert "accumulation.micro_batch_size" not in outcome.settings


def test_a_memory_proposal_still_over_the_limit_gives_way_to_the_next():
    outcome = _search(MemoryScript(), limit=6 * GiB, levers=[_memory_lever()])
    assert _decision(outcome, SMALL_16).status == "over_memory"
    kept = _decision(outcome, SMALL_8)
    assert kept.status == "kept" and kept.peak_memory_bytes == 5 * GiB
    assert outcome.settings == SMALL_8


def test_when_no_memory_lever_fits_the_search_warns_and_holds_the_peak():
    # Over the limit whatever is tried: changes that keep the peak (within the slack) may
    # still be kept; one that raises it further is over_memory.
    within = MemoryScript(fused_extra=int(10 * GiB * PEAK_SLACK / 2))
    outcome = _search(within, limit=4 * GiB, levers=[*default_levers(), _memory_lever()])
    assert {d.status for d in outcome.decisions if d.lever == "micro_batch"} == {"over_memory"}
    assert any("no memory lever brought it under" in w for w in outcome.warnings)
    assert outcome.settings == FUSED
    beyond = _search(MemoryScript(fused_extra=2 * GiB), limit=4 * GiB, levers=[*default_levers(), _memory_lever()])
    assert _decision(beyond, FUSED).status == "over_memory"
    assert "itself over the 4.00 GiB limit" in _decision(beyond, FUSED).reason


def test_a_memory_lever_is_not_stopped_early_for_being_slower():
    class Stoppable(MemoryScript):
        def __call__(self, settings, repeat, slower_than_ms=None, **_):
            result = super().__call__(settings, repeat)
            result.stopped_early = slower_than_ms is not None and result.ms_per_step > slower_than_ms
            return result

    lever = Lever("micro_batch", "smaller micro-batches", EXACT, lambda incumbent, ctx: [SMALL_8], for_memory=True)
    outcome = run_search([lever], _context(6 * GiB), Stoppable(), SearchOptions(early_stop=1.1))
    assert outcome.settings == SMALL_8  # 1.6x slower, over the 1.1x early stop: still run in full, and kept


# -- the limit ----------------------------------------------------------------------------------

def test_the_default_limit_is_a_margin_under_the_device_memory():
    assert default_memory_limit({"device": "cpu", "ram_bytes": 16 * GiB}) == int(16 * GiB * MEMORY_MARGIN)
    assert default_memory_limit({"device": "cuda", "gpu_memory_bytes": 80 * GiB, "ram_bytes": GiB}) == 72 * GiB
    assert default_memory_limit({"device": "cpu"}) is None
    assert limit_source(72 * GiB, {"device": "cuda", "gpu_memory_bytes": 80 * GiB}) == "90% of the GPU's 80.00 GiB"
    assert limit_source(12 * GiB, {"device": "cuda", "gpu_memory_bytes": 80 * GiB}) == "given with --memory-limit"
    assert limit_source(None, {}).startswith("none")


def test_sizes_are_compact():
    assert [size(n) for n in (0, None, 812 * 2**20, int(12.4 * GiB), 141 * GiB)] == [
        "n/a", "n/a", "812 MiB", "12.40 GiB", "141.0 GiB"]


def test_the_context_carries_the_doctor_peak_and_the_default_limit():
    facts = Facts(env={"device": "cpu", "cpu_cores": 2, "ram_bytes": 20 * GiB}, steps=[StepRecord(0, 10.0)],
                  peak_memory_bytes=3 * GiB)
    context = context_from_facts(facts)
    assert context.peak_memory_bytes == 3 * GiB
    assert context.memory_limit_bytes == int(20 * GiB * MEMORY_MARGIN)
