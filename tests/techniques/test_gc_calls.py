"""The gc technique: the script's own gc.collect() calls, thinned; its finding, probe and lever."""

from __future__ import annotations

import gc

import pytest
import torch

from torchboost.config import ConfigError, Overlay
from torchboost.evidence.host_lines import HostLine
from torchboost.evidence.host_side import HostFacts
from torchboost.techniques import gc_calls
from torchboost.techniques._tuning import TuneContext
from torchboost.techniques.gc_calls import GcConfig, GcTuning, collect_every, host_gc
from torchboost.techniques.registry import ProbeContext


def test_the_section_takes_a_count_or_its_words():
    assert GcConfig(every=100).every == 100 and GcConfig.off().every == "keep"
    for bad in (0, -3, True, "often", 2.5):
        with pytest.raises(ConfigError, match="gc.every"):
            GcConfig(every=bad)


def test_one_call_in_n_runs_and_the_original_comes_back():
    original = gc.collect
    thinned = collect_every(3)
    try:
        ran = [gc.collect() for _ in range(6)]
        assert thinned.calls == 6 and gc.collect is thinned
    finally:
        thinned.restore()
    assert gc.collect is original
    assert ran[0] == ran[1] == ran[3] == ran[4] == 0  # skipped calls return at once


def _train(*, every: int | None, lr: float = 0.1) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    thinned = collect_every(every) if every else None
    try:
        for _ in range(10):
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            gc.collect()
    finally:
        if thinned is not None:
            thinned.restore()
    return [p.detach().clone() for p in model.parameters()]


def test_thinned_collections_train_the_same_weights_bit_for_bit():
    """The plain loop (a collection every step) is the reference; collecting one call in 5
    changes no weight. The broken twin, another learning rate, is caught by the same check."""
    plain, thinned, broken = _train(every=None), _train(every=5), _train(every=5, lr=0.2)
    assert all(torch.equal(a, b) for a, b in zip(plain, thinned))
    assert not all(torch.equal(a, b) for a, b in zip(plain, broken))


def test_the_rule_fires_on_its_example_and_not_on_a_cheap_collection():
    finding = host_gc(gc_calls._example())
    assert finding is not None and finding.id == "host.gc" and "train.py:42 gc.collect()" in finding.title
    assert finding.fix == Overlay.of(GcConfig, every=100) and finding.expected_speedup > 10
    cheap = gc_calls._example()
    cheap.host.lines[0].ms_by_step = {i: 1.0 for i in cheap.host.lines[0].ms_by_step}  # 1 ms of a 163 ms step
    assert host_gc(cheap) is None


def _line(code: str) -> HostLine:
    return HostLine("other", "/home/me/train.py", 42, code, "", {5: 100.0})


def test_the_quick_switch_skips_the_calls_of_a_step_and_only_where_the_sampler_saw_one():
    ctx = ProbeContext(model=None, optimizer=None, loader=None, device="cpu", host_lines=(_line("gc.collect()"),))
    switch = gc_calls._quick(ctx)
    original = gc.collect
    assert switch is not None and switch.setting == {"gc.every": 100}
    switch.on()
    try:
        assert gc.collect() == 0 and gc.collect is not original
    finally:
        switch.off()
    assert gc.collect is original
    twin = ProbeContext(model=None, optimizer=None, loader=None, device="cpu", host_lines=(_line("loss.item()"),))
    assert gc_calls._quick(twin) is None


def test_tune_proposes_it_where_the_doctor_measured_the_collection():
    lever = gc_calls.TECHNIQUE.levers[0]
    costly = TuneContext().with_own(GcTuning(gc_pct=60.0))
    assert lever.proposer(Overlay(), costly) == [Overlay.of(GcConfig, every=100)]
    assert lever.proposer(Overlay(), TuneContext().with_own(GcTuning(gc_pct=1.0))) == []
    assert gc_calls._tune_context(gc_calls._example()).gc_pct > 90
    assert gc_calls._tune_context(type(gc_calls._example())(host=HostFacts())).gc_pct == 0.0


def test_run_thins_the_calls_from_the_scripts_start_and_says_so():
    notes: list[str] = []
    original = gc.collect
    gc_calls._nocode_start({"every": 50}, notes)
    try:
        assert isinstance(gc.collect, gc_calls._Thinned) and notes == ["gc.collect() runs one call in 50"]
    finally:
        gc.collect.restore()  # type: ignore[attr-defined]
    assert gc.collect is original
    gc_calls._nocode_start({"every": "keep"}, notes)  # the twin: the script's calls as they are
    assert gc.collect is original and len(notes) == 1
