"""Activation checkpointing: the plain model's gradients, less saved activation memory.

The reference is written without torchboost: the same model, seed and batch in plain
PyTorch. Its broken twin (a "checkpoint" that cuts the graph at each block's input)
must fail the same comparison. Memory is counted exactly, as the bytes autograd saves
for backward during the forward (``saved_tensors_hooks``): no timing here.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

import torchboost
from torchboost.config import BoostConfig, Overlay
from torchboost.diagnose import diagnose
from torchboost.frameworks import fix_words
from torchboost.nocode import Applier
from torchboost.plan import Plan
from torchboost.techniques.checkpointing import (
    CheckpointingConfig, CheckpointingFacts, TECHNIQUE, apply_checkpointing, checkpointing_blocks,
    remove_checkpointing,
)
from torchboost.techniques.registry import ProbeContext, TuneContext, application_order


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(self.norm(x))


class _Stack(nn.Module):
    def __init__(self, width: int = 32, depth: int = 4) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.ModuleList(_Block(width) for _ in range(depth))
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def _grads_and_saved_bytes(model: nn.Module) -> tuple[list[torch.Tensor], int]:
    """One training step's gradients (dropout on, seed fixed) and the bytes saved for backward."""
    torch.manual_seed(1)
    x = torch.randn(64, 8)
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).pow(2).mean()
    loss.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()], saved[0]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return _Stack()


def _cut_graph_twin(model: nn.Module) -> None:
    # Broken on purpose: each block sees a detached input, so nothing flows back through it.
    for block in model.blocks:
        block.forward = lambda x, _f=block.forward: _f(x.detach())


def test_same_gradients_as_plain_pytorch_with_less_saved_memory():
    plain_grads, plain_bytes = _grads_and_saved_bytes(_model())
    model = _model()
    assert apply_checkpointing(model) == [f"blocks.{i}" for i in range(4)]
    grads, saved = _grads_and_saved_bytes(model)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))  # bit for bit, dropout included
    assert saved < plain_bytes / 3  # each block keeps only its input


def test_the_broken_twin_fails_the_gradient_comparison():
    plain_grads, _ = _grads_and_saved_bytes(_model())
    twin = _model()
    _cut_graph_twin(twin)
    grads, _ = _grads_and_saved_bytes(twin)
    assert not all(torch.equal(a, b) for a, b in zip(grads, plain_grads))


def test_eval_runs_plainly_and_removal_restores_the_model():
    model = _model()
    reference = copy.deepcopy(model)
    apply_checkpointing(model)
    model.eval()
    reference.eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))
    assert remove_checkpointing(model) == 4 and "forward" not in model.blocks[0].__dict__
    assert copy.deepcopy(model).state_dict().keys() == reference.state_dict().keys()


def test_the_booster_applies_it_and_off_leaves_the_model_plain():
    config = BoostConfig.off().replace(checkpointing={"scope": "blocks"})
    model, optimizer = _model(), None
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    prepared = booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))[0]
    assert all("forward" in block.__dict__ for block in prepared.blocks)
    plain = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False).prepare(_model(), optimizer)[0]
    assert all("forward" not in block.__dict__ for block in plain.blocks)


def test_torchboost_run_applies_it_at_the_root():
    applier = Applier(Plan.applying(Overlay.of(CheckpointingConfig, scope="blocks"))).install()
    try:
        model = _model()
        model(torch.randn(2, 8))  # the first forward finds the root
    finally:
        applier.uninstall()
    assert all("forward" in block.__dict__ for block in model.blocks)


def test_its_place_facts_finding_lever_and_spelling():
    order = [name for name, _ in application_order()]
    assert order.index("memory") < order.index("checkpointing") < order.index("compile")
    facts_seen = TECHNIQUE.probe(ProbeContext(model=_model(), optimizer=None, loader=None, device="cpu"))
    assert facts_seen == CheckpointingFacts(repeated_blocks=4, checkpointed=False)
    words = fix_words(Overlay.of(CheckpointingConfig, scope="blocks"))
    assert words["toml"] == '[checkpointing]\nscope = "blocks"'
    assert words["transformers"] == "TrainingArguments(gradient_checkpointing=True)"
    assert "torch.utils.checkpoint.checkpoint" in words["torch"]
    lever = TECHNIQUE.levers[0]
    assert lever.for_memory  # tried only to fit in memory, never as a speedup
    ctx = TuneContext(techniques={"checkpointing": facts_seen})
    assert lever.propose({}, ctx) == [Overlay.of(CheckpointingConfig, scope="blocks")]
    assert lever.propose({}, TuneContext()) == []  # no repeated block seen


def test_the_finding_fires_near_the_memory_limit_and_is_listed_as_a_memory_fix():
    example = TECHNIQUE.rules[0].example()  # 92% of the RAM, 4 blocks
    f = checkpointing_blocks(example)
    assert f is not None and f.memory_ratio > 1.5 and f.expected_speedup == pytest.approx(1 / 1.3)
    assert f.fix == Overlay.of(CheckpointingConfig, scope="blocks")
    assert checkpointing_blocks(dataclasses.replace(example, peak_rss_bytes=example.peak_rss_bytes // 2)) is None
    one_block = {"checkpointing": CheckpointingFacts(repeated_blocks=1)}
    assert checkpointing_blocks(dataclasses.replace(example, techniques=one_block)) is None  # nothing repeated
    assert "checkpointing.blocks" in [x.id for x in diagnose(example)]
