"""torch.compile, one technique: its ``[compile]`` section, its descriptor and its public names.

The parts, each usable on its own:

* :mod:`~torchboost.techniques.compile.safe_compile`: :func:`apply_compile` with its
  safety net (eager after a failure, the recompile limit noticed), :func:`remove_compile`;
* :mod:`~torchboost.techniques.compile.compile_settings`: the ``[compile]`` section;
* :mod:`~torchboost.techniques.compile.compile_facts`: what torch.compile did in the
  observed process (its facts);
* :mod:`~torchboost.techniques.compile.compile_diagnosis`: its finding;
* :mod:`~torchboost.techniques.compile.compile_candidates`: the modes tune tries (max-autotune
  only where its compile can be repaid);
* :mod:`~torchboost.techniques.compile.compile_cache`: the persistent cache tune and run share.

The repeated blocks regional compile compiles are found in :mod:`torchboost.techniques._model`.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from torchboost.config import Overlay
from torchboost.techniques._model import find_repeated_blocks
from torchboost.techniques.compile.compile_candidates import CompileTuning, compile_modes, compile_tune_context
from torchboost.techniques.compile.compile_diagnosis import compile_enable
from torchboost.techniques.compile.compile_facts import CompileFacts, observe_compile
from torchboost.techniques.compile.compile_settings import CompileConfig
from torchboost.techniques.compile.safe_compile import (
    CompileStats, CompileWarning, apply_compile, remove_compile, resolve_compile,
)
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ResolveContext, Resolution, Rule, Technique, TuneContext,
)

__all__ = [
    "CompileConfig",
    "CompileFacts",
    "CompileStats",
    "CompileTuning",
    "CompileWarning",
    "GPU_MODES",
    "TECHNIQUE",
    "apply_compile",
    "find_repeated_blocks",
    "remove_compile",
    "resolve_compile",
]


# -- the descriptor ---------------------------------------------------------------------

def _resolve(ctx: ResolveContext) -> Resolution:
    chosen, reason = resolve_compile(ctx.config.section(CompileConfig), ctx.env)
    return Resolution(Overlay.of(CompileConfig, mode=chosen.mode, scope=chosen.scope), {"compile.mode": reason})


def _apply(prep: Preparation) -> None:
    # After the model has its device and memory format (Inductor specialises on both),
    # before the DDP wrap (DDP all-reduces the compiled module's gradients).
    section = prep.config.section(CompileConfig)
    prep.compile_stats = apply_compile(prep.model, mode=section.mode, scope=section.scope)


def _nocode_root(values: dict[str, Any], module: nn.Module, notes: list[str]) -> None:
    mode = values.get("mode", "off")
    if mode != "off":
        apply_compile(module, mode=mode, scope=values.get("scope", "model"))
        notes.append(f"compiled {type(module).__name__} ({mode})")


GPU_MODES = ("reduce-overhead", "max-autotune")
"""Tried on CUDA only, as measured candidates beside the default: reduce-overhead adds CUDA
graphs (launch-bound steps), max-autotune searches kernels (a compile of minutes, proposed
only where the budget and the planned run leave room for it: :func:`~torchboost.techniques.
compile.compile_candidates.autotune_refusal`)."""


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    return [Overlay.of(CompileConfig, mode=mode) for mode in compile_modes(ctx)]


def _spell(section: CompileConfig) -> FrameworkSpelling:
    if section.mode == "off":
        return FrameworkSpelling()
    mode = "" if section.mode == "default" else f', mode="{section.mode}"'
    code = (("for block in repeated_blocks: block.compile(" + mode[2:] + ")  # e.g. each transformer layer",)
            if section.scope == "regional" else (f"model = torch.compile(model{mode})",))
    transformers = {"torch_compile": True, **({"torch_compile_mode": section.mode} if mode else {})}
    return FrameworkSpelling(accelerate={"dynamo_config": {"dynamo_backend": "INDUCTOR", "dynamo_mode": section.mode}},
                             transformers=transformers, code=code)


TECHNIQUE = Technique(
    name="compile",
    title="torch.compile",
    after=('memory',),
    placed='compile traces the model in its final layout, and before the DDP wrap (compiling the DDP-wrapped model breaks the graph at every bucket)',
    section=CompileConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(wants_root=lambda values: values.get("mode", "off") != "off", at_root=_nocode_root),
    levers=(Lever("compile", "torch.compile", Parity.EXACT, _propose, ("compile.enable",), priority=50,
                  fixed_cost="compile", draws_own_random=True),),
    tune_context=compile_tune_context,
    spell=_spell,
    facts=CompileFacts,
    observe=observe_compile,
    rules=(Rule("compile.enable", compile_enable),),
)
