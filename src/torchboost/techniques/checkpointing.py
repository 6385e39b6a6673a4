"""Activation checkpointing: keep each repeated block's input, recompute its inside in backward.

A memory lever, for the batch that does not fit. ``scope = "blocks"`` runs each repeated
block of the model (the children of a ``ModuleList`` / ``Sequential`` that share a
class, e.g. transformer layers: the blocks regional compile finds) under
``torch.utils.checkpoint`` (non-reentrant). The forward then keeps only each block's
input for backward, instead of every activation inside it, and backward runs each
block's forward again: the same gradients, bit for bit in fp32 on a CPU (the random
state is restored for the recomputation, so dropout draws the same mask), for about
one more forward pass of compute.

Like compile, it replaces ``forward`` on each block *instance* (the model object, its
parameters and its ``state_dict()`` keys stay the user's); outside training (``eval()``
or ``torch.no_grad()``) a block runs plainly. It comes before compile (compile traces
the checkpointed blocks, regional compile wraps them) and before the DDP wrap.

``"off"`` (the default) changes nothing. tune tries it only as a memory lever: when the
script's peak is over the memory limit, never as a speedup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from torchboost.config import Overlay, check_choice
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, ModelFacts, StepRecord
from torchboost.evidence.rulekit import r, view
from torchboost.techniques._model import InstanceForward, find_repeated_blocks, remove_forwards
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, Rule, Technique, TuneContext,
)

__all__ = ["CheckpointingConfig", "CheckpointingFacts", "apply_checkpointing", "remove_checkpointing"]


@dataclass(frozen=True, kw_only=True)
class CheckpointingConfig:
    """Activation checkpointing of the model's repeated blocks."""

    section: ClassVar[str] = "checkpointing"
    SCOPES: ClassVar[tuple[str, ...]] = ("off", "blocks")

    scope: str = "off"
    """off | blocks (each repeated block under ``torch.utils.checkpoint``, non-reentrant)."""

    def __post_init__(self) -> None:
        check_choice("checkpointing.scope", self.scope, self.SCOPES)

    @classmethod
    def off(cls) -> "CheckpointingConfig":
        """No checkpointing: plain PyTorch."""
        return cls(scope="off")


class _CheckpointedForward(InstanceForward):
    """Instance ``forward`` of a block: its class's forward under ``checkpoint`` while training.

    The forward it replaces is kept unbound (:class:`InstanceForward`), so a
    ``copy.deepcopy`` of the model stays bound to the copy.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not (self._module.training and torch.is_grad_enabled()):
            return self.plain(*args, **kwargs)  # nothing is kept for backward anyway
        return checkpoint(self._func, self._module, *args, use_reentrant=False, **kwargs)


def apply_checkpointing(model: nn.Module) -> list[str]:
    """Checkpoint each repeated block of ``model`` in place; the qualified names of the
    blocks now checkpointed (empty: the model has no repeated block)."""
    names = []
    for name, block in find_repeated_blocks(model):
        if not _CheckpointedForward.installed_on(block):
            block.forward = _CheckpointedForward(block)
        names.append(name)
    return names


def remove_checkpointing(model: nn.Module) -> int:
    """Undo :func:`apply_checkpointing`; how many blocks run plainly again."""
    return remove_forwards(model, _CheckpointedForward)


# -- its facts and diagnosis --------------------------------------------------------------

@dataclass(frozen=True)
class CheckpointingFacts:
    """The model's repeated blocks, and whether the script checkpoints them itself."""

    technique: ClassVar[str] = "checkpointing"

    repeated_blocks: int = 0
    """Blocks :func:`apply_checkpointing` would checkpoint."""
    checkpointed: bool = False
    """Already on: by torchboost, or Hugging Face's ``gradient_checkpointing_enable()``."""


def _probe(ctx: ProbeContext) -> CheckpointingFacts:
    if ctx.model is None:
        return CheckpointingFacts()
    model = getattr(ctx.model, "_orig_mod", ctx.model)
    ours = any(_CheckpointedForward.installed_on(m) for m in model.modules())
    theirs = bool(getattr(model, "is_gradient_checkpointing", False))
    return CheckpointingFacts(repeated_blocks=len(find_repeated_blocks(model)), checkpointed=ours or theirs)


_STATE_BYTES_PER_PARAMETER = 16
"""Weights, gradients and Adam's two moments in fp32: what checkpointing does not shrink."""


def checkpointing_blocks(facts: Facts, *, memory_used_pct: float = 85.0) -> Finding | None:
    """Peak memory is at least ``memory_used_pct`` percent of the device's (RAM on a CPU run)
    and the model has repeated blocks not yet checkpointed: checkpointing them frees most
    activation memory, for about one more forward pass of compute."""
    v, model, own = view(facts), facts.model, facts.seen(CheckpointingFacts)
    if v.device == "cuda":
        peak, total = facts.peak_memory_bytes, facts.device_memory_total_bytes
    else:
        peak, total = facts.peak_rss_bytes, int(facts.env.get("ram_bytes") or 0)
    if model is None or own.checkpointed or own.repeated_blocks < 2 or peak <= 0 or total <= 0 or v.step_ms <= 0:
        return None
    used = 100 * peak / total
    if used < memory_used_pct:
        return None
    n, state = own.repeated_blocks, _STATE_BYTES_PER_PARAMETER * model.parameters
    activations = max(0, peak - state)
    after = state + 2 * activations / n  # each block's input kept, one block's inside live at a time
    ratio = peak / after if after > 0 else 1.0
    cost = 1.0 + v.share["forward"]  # backward runs the blocks' forward once more
    return Finding(
        id="checkpointing.blocks",
        title=f"Peak memory is {used:.0f}% of the device's; checkpoint the {n} repeated blocks to fit",
        evidence={"peak_memory_bytes": peak, "memory_total_bytes": total, "memory_used_pct": r(used, 1),
                  "repeated_blocks": n, "parameters": model.parameters, "forward_pct": r(100 * v.share["forward"], 1)},
        fix=Overlay.of(CheckpointingConfig, scope="blocks"),
        expected_speedup=1.0 / cost,
        memory_ratio=ratio,
        formula=f"peak P / (S + 2 (P - S) / n) = {ratio:.2f}x less; P = {peak / 2**20:.0f} MiB, S = "
                f"{_STATE_BYTES_PER_PARAMETER} bytes x {model.parameters} parameters (weights, gradients, Adam; "
                f"assumed), n = {n} blocks; time x (1 + forward share) = x{cost:.2f}, so = {1 / cost:.3f}",
        notes=["The same gradients: only the memory and the time change. torchboost tune measures both, "
               "and keeps it only when the peak is over the memory limit (--memory-limit)."],
    )


def _example() -> Facts:
    # A 10M-parameter model of 4 blocks on a CPU run whose peak RSS is 92% of 16 GiB of RAM.
    ram = 16 * 2**30
    steps = [StepRecord(i, 100.0, forward_ms=30.0, backward_ms=60.0) for i in range(5)]
    return Facts(env={"device": "cpu", "ram_bytes": ram}, steps=steps, peak_rss_bytes=int(0.92 * ram),
                 model=ModelFacts(parameters=10_000_000, device="cpu"),
                 techniques={"checkpointing": CheckpointingFacts(repeated_blocks=4)})


# -- the descriptor ------------------------------------------------------------------------

def _apply(prep: Preparation) -> None:
    if prep.config.section(CheckpointingConfig).scope == "blocks":
        apply_checkpointing(prep.model)


def _nocode_root(values: dict[str, Any], module: nn.Module, notes: list[str]) -> None:
    if values.get("scope") == "blocks":
        notes.append(f"activation checkpointing on {len(apply_checkpointing(module))} blocks")


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    own = ctx.seen(CheckpointingFacts)
    return [Overlay.of(CheckpointingConfig, scope="blocks")] if own.repeated_blocks >= 2 and not own.checkpointed else []


def _spell(section: CheckpointingConfig) -> FrameworkSpelling:
    if section.scope != "blocks":
        return FrameworkSpelling()
    return FrameworkSpelling(
        transformers={"gradient_checkpointing": True},
        code=("for block in repeated_blocks: block.forward = functools.partial("
              "torch.utils.checkpoint.checkpoint, block.forward, use_reentrant=False)  # e.g. each transformer layer",))


TECHNIQUE = Technique(
    name="checkpointing",
    title="activation checkpointing",
    after=("memory",),
    before=("compile",),
    placed="it wraps each block's forward once the weights have their layout, before compile traces "
           "the blocks (regional compile wraps the checkpointed ones) and before the DDP wrap",
    section=CheckpointingConfig,
    apply=_apply,
    nocode=NoCode(wants_root=lambda values: values.get("scope") == "blocks", at_root=_nocode_root),
    levers=(Lever("checkpointing", "activation checkpointing (each repeated block)", Parity.EXACT, _propose,
                  ("checkpointing.blocks",), priority=120, for_memory=True),),
    spell=_spell,
    facts=CheckpointingFacts,
    probe=_probe,
    rules=(Rule("checkpointing.blocks", checkpointing_blocks, example=_example),),
)
