"""The findings for a step DDP's all-reduce holds, each with facts that fire it and a twin that
does not; the DDP facts read from a live wrapper."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torchboost.config import Overlay
from torchboost.frameworks import finding_words
from torchboost.techniques.accumulation import AccumulationConfig
from torchboost.techniques.distributed import DdpFacts, probe_ddp
from torchboost.techniques.distributed.distributed_diagnosis import (
    bucket_cap, ddp_example, ddp_words, find_unused, no_sync, static_graph,
)
from torchboost.techniques.registry import ProbeContext

MIB = 2**20


# -- accumulation under no_sync ----------------------------------------------------------------

def test_an_all_reduce_that_holds_the_step_asks_for_windows_under_no_sync():
    f = no_sync(ddp_example())  # 29.1 of 40 ms exposed
    assert f.title.startswith("The all-reduce holds 73% of the step; accumulate 8 batches under no_sync")
    assert f.changes_training and f.unit == "sample" and f.expected_speedup == pytest.approx(1 / (0.2725 + 0.7275 / 8))
    assert "1 / (0.273 + 0.727 / 8) = 2.752" in f.formula
    assert "model.no_sync()" in f.advice_code and not f.fix  # a plain script: its own loop changes
    assert finding_words(f)["toml"].startswith("# no torchboost.toml key:")


def test_through_the_booster_or_a_framework_the_window_is_a_setting_in_their_words():
    booster = no_sync(dataclasses.replace(ddp_example(), uses_booster=True))
    assert booster.fix == Overlay.of(AccumulationConfig, steps=8)
    words = finding_words(no_sync(dataclasses.replace(ddp_example(), frameworks=["lightning"])))
    assert "accumulate_grad_batches=8" in words["lightning"] and "gradient_accumulation_steps" in words["accelerate"]


def test_twin_small_collectives_ask_for_no_window():
    assert no_sync(ddp_example(collective_ms=6.0)) is None  # 15% of the step


def test_accumulation_that_all_reduces_every_micro_batch_is_told_to_skip_all_but_the_last():
    f = no_sync(ddp_example(micro=4.0, allreduces=24))  # 12 a step: 4 micro-batches x 3 buckets
    assert f.title.startswith("Each of the 4 accumulated micro-batches all-reduces its gradients (12 all-reduces")
    assert not f.changes_training and f.unit == "step"
    assert f.expected_speedup == pytest.approx(1 / (1 - 0.7275 * 0.75))


def test_twin_accumulation_that_all_reduces_once_a_window_is_left_alone():
    assert no_sync(ddp_example(micro=4.0, allreduces=6)) is None  # 3 a step: once per bucket


# -- DDP's buckets -----------------------------------------------------------------------------

def test_big_buckets_and_no_overlap_ask_for_smaller_buckets():
    f = bucket_cap(ddp_example(collective_ms=14.0, overlap_pct=0.0))
    assert "buckets of 16 MB start it earlier" in f.title
    assert f.advice_code == "model = DistributedDataParallel(model, bucket_cap_mb=16)"
    # hideable: min(14 x 3/4, 19 ms of backward ops) = 10.5 ms, half given back
    assert f.expected_speedup == pytest.approx(40 / (40 - 5.25)) and "40.0 / (40.0 - 5.2)" in f.formula


@pytest.mark.parametrize("change", [dict(overlap_pct=60.0), dict(largest_param_bytes=60 * MIB),
                                    dict(collective_ms=4.0), dict(ddp=False)])
def test_twin_overlapped_one_tensor_small_or_no_ddp_asks_for_no_bucket_size(change):
    assert bucket_cap(ddp_example(**{"collective_ms": 14.0, "overlap_pct": 0.0, **change})) is None


# -- the search for unused parameters ------------------------------------------------------------

def test_a_search_that_finds_nothing_asks_for_find_unused_parameters_false():
    f = find_unused(ddp_example(collective_ms=4.0, ddp_forward_ms=2.0, find_unused_parameters=True,
                                unused_param_bytes=0))
    assert f.advice_code == "model = DistributedDataParallel(model, find_unused_parameters=False)"
    assert f.expected_speedup == pytest.approx(40 / 39) and "T / (T - r x D) = 40.0 / (40.0 - 0.5 x 2.00)" in f.formula


@pytest.mark.parametrize("change", [dict(find_unused_parameters=False), dict(unused_param_bytes=4 * MIB),
                                    dict(ddp_forward_ms=0.1)])
def test_twin_no_search_unused_found_or_a_cheap_forward_asks_nothing_of_find_unused(change):
    facts = ddp_example(**{"collective_ms": 4.0, "ddp_forward_ms": 2.0, "find_unused_parameters": True,
                           "unused_param_bytes": 0, **change})
    assert find_unused(facts) is None


def test_parameters_unused_every_step_ask_for_a_static_graph():
    facts = ddp_example(collective_ms=4.0, ddp_forward_ms=2.0, find_unused_parameters=True,
                        unused_param_bytes=4 * MIB)
    f = static_graph(facts)
    assert f.title.startswith("4.0 MiB of parameters go unused") and "static_graph=True" in f.advice_code
    assert find_unused(facts) is None  # the other fix would stop the run at the first unused parameter


@pytest.mark.parametrize("change", [dict(static_graph=True), dict(unused_param_bytes=0),
                                    dict(find_unused_parameters=False)])
def test_twin_a_static_graph_already_or_nothing_unused_asks_for_none(change):
    facts = ddp_example(**{"collective_ms": 4.0, "ddp_forward_ms": 2.0, "find_unused_parameters": True,
                           "unused_param_bytes": 4 * MIB, **change})
    assert static_graph(facts) is None


@pytest.mark.parametrize("frameworks, words", [
    ([], "model = DistributedDataParallel(model, static_graph=True)"),
    (["lightning"], "trainer = Trainer(strategy=DDPStrategy(static_graph=True))"),
    (["accelerate"], "accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(static_graph=True)])"),
    (["transformers"], "args = TrainingArguments(..., ddp_static_graph=True)"),
])
def test_ddp_settings_are_said_in_the_words_of_what_builds_the_ddp(frameworks, words):
    assert ddp_words(dataclasses.replace(ddp_example(), frameworks=frameworks), static_graph=True).startswith(words)


# -- the facts, read from a live wrapper ---------------------------------------------------------

@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _context(model: nn.Module) -> ProbeContext:
    return ProbeContext(model=model, optimizer=None, loader=None, device="cpu")


def test_the_probe_reads_the_wrapper_s_settings_and_buckets(one_rank):
    model = DistributedDataParallel(nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512)), bucket_cap_mb=1,
                                    find_unused_parameters=True)
    for _ in range(2):
        model(torch.randn(2, 512)).sum().backward()
    facts = probe_ddp(_context(model))
    assert facts.ddp and facts.world_size == 1 and facts.backend == "gloo" and facts.find_unused_parameters
    assert facts.bucket_cap_bytes == MIB and facts.unused_param_bytes == 0
    assert facts.grad_bytes == 2 * (512 * 512 + 512) * 4 == sum(facts.bucket_bytes) and len(facts.bucket_bytes) >= 2
    assert facts.largest_param_bytes == 512 * 512 * 4


def test_twin_a_model_without_ddp_has_no_ddp_facts():
    assert probe_ddp(_context(nn.Linear(4, 4))) == DdpFacts()
