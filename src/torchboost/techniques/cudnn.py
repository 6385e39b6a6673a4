"""cuDNN's autotuner: ``torch.backends.cudnn.benchmark``.

With ``benchmark = True`` cuDNN times the candidate algorithms for each convolution the
first time it sees an input shape and keeps the fastest; without it, it picks one by
heuristic. The timing is paid again for every new shape, so it pays when the shapes are
fixed and can cost when they vary (the last, shorter batch of an epoch is one new shape;
variable-length images are many). The maths is the same up to float rounding of the
chosen algorithm. On a CPU it does nothing: cuDNN is not used.

``"auto"``: on, on CUDA only, for a model with convolutions fed by a DataLoader whose
batches all have the same shapes (a batch size, a last batch as full as the others, and
samples of one shape); otherwise torch's setting is left as it is (off, unless the
script set it), and the reason says which of these decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from torchboost.config import AUTO, KEEP, BoolOrWord, Overlay, check_bool_or_word
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import amdahl, cuda_conv_compute_share, r
from torchboost.techniques.memory import MemoryTuning
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, ResolveContext, Resolution, Rule, Technique, TuneContext,
)

__all__ = ["CudnnConfig", "apply_benchmark", "fixed_shapes", "resolve_benchmark"]

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
SAMPLES_COMPARED = 2
"""Samples of the dataset whose shapes are compared to tell whether they are fixed."""


@dataclass(frozen=True, kw_only=True)
class CudnnConfig:
    """cuDNN settings."""

    section: ClassVar[str] = "cudnn"

    benchmark: BoolOrWord = AUTO
    """auto (on CUDA for convolutions with fixed input shapes, else as torch has it) | keep |
    true | false:
    ``torch.backends.cudnn.benchmark``. No effect on a CPU."""

    def __post_init__(self) -> None:
        check_bool_or_word("cudnn.benchmark", self.benchmark, (AUTO, KEEP))

    @classmethod
    def off(cls) -> "CudnnConfig":
        """torch's own setting, as the script left it."""
        return cls(benchmark=KEEP)


def _shapes(sample: Any) -> Any:
    if isinstance(sample, torch.Tensor):
        return tuple(sample.shape)
    if isinstance(sample, (list, tuple)):
        return tuple(_shapes(s) for s in sample)
    if isinstance(sample, dict):
        return tuple(sorted((k, _shapes(v)) for k, v in sample.items()))
    return None


def fixed_shapes(loader: Any) -> tuple[bool, str]:
    """Whether every batch of ``loader`` has the same input shapes, and why (or why unknown)."""
    if not isinstance(loader, DataLoader):
        return False, "no DataLoader to tell whether input shapes are fixed"
    if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
        return False, "the batches' shapes cannot be known ahead (an IterableDataset or no batch_size)"
    try:
        size = len(loader.dataset)
        samples = [loader.dataset[i] for i in range(min(SAMPLES_COMPARED, size))]
    except (TypeError, IndexError, KeyError, NotImplementedError):
        return False, "the dataset's samples cannot be read ahead to compare their shapes"
    if not loader.drop_last and size % loader.batch_size:
        return False, f"the last batch is shorter ({size % loader.batch_size} of {loader.batch_size}): a new shape"
    if len({repr(_shapes(s)) for s in samples}) > 1:
        return False, "samples differ in shape"
    return True, "fixed input shapes"


def resolve_benchmark(requested: bool | str, model: nn.Module, loader: Any, *, device: torch.device) -> tuple[Any, str]:
    """Resolve ``cudnn.benchmark`` ("auto", "keep", True or False) to what is set, and why."""
    if requested == KEEP:
        return KEEP, f"keep: torch's {torch.backends.cudnn.benchmark}"
    if isinstance(requested, bool):
        return requested, "set in config" + ("" if torch.device(device).type == "cuda" else " (no effect off CUDA)")
    # "auto" only ever turns it on; otherwise torch's setting (off unless the script set
    # it) is left alone, so a script's own choice is never undone behind its back.
    if torch.device(device).type != "cuda":
        return KEEP, f"on {torch.device(device).type} cuDNN is not used: left as is"
    if not any(isinstance(m, _CONV) for m in model.modules()):
        return KEEP, "the model has no convolution: left as is"
    fixed, why = fixed_shapes(loader)
    if not fixed:
        return KEEP, f"{why}, which would be benchmarked again: left as is"
    return True, f"convolutions on CUDA with {why}: cuDNN times its algorithms once and keeps the fastest"


def apply_benchmark(value: Any) -> None:
    """Set ``torch.backends.cudnn.benchmark`` to ``value``; "keep" leaves it as it is."""
    if isinstance(value, bool):
        torch.backends.cudnn.benchmark = value


# -- the descriptor ---------------------------------------------------------------------

def _resolve(ctx: ResolveContext) -> Resolution:
    value, reason = resolve_benchmark(ctx.config.section(CudnnConfig).benchmark, ctx.model, ctx.loader, device=ctx.device)
    return Resolution(Overlay.of(CudnnConfig, benchmark=value), {"cudnn.benchmark": reason})


def _apply(prep: Preparation) -> None:
    # A process-wide switch, set with the others before the model is touched.
    apply_benchmark(prep.config.section(CudnnConfig).benchmark)


def _nocode_start(values: dict[str, Any], notes: list[str]) -> None:
    if isinstance(values.get("benchmark"), bool):
        apply_benchmark(values["benchmark"])
        notes.append(f"cudnn.benchmark set to {values['benchmark']}")


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    # Only on CUDA with 2-D convolutions (the memory technique's tuning facts know them): on
    # a CPU it is inert, and a trial would measure noise.
    if ctx.device != "cuda" or not ctx.own(MemoryTuning).has_conv2d:
        return []
    return [Overlay.of(CudnnConfig, benchmark=True)]


def _spell(section: CudnnConfig) -> FrameworkSpelling:
    if not isinstance(section.benchmark, bool):
        return FrameworkSpelling()
    return FrameworkSpelling(lightning={"benchmark": section.benchmark},
                             code=(f"torch.backends.cudnn.benchmark = {section.benchmark}",))


# -- its facts and diagnosis ----------------------------------------------------------------

@dataclass(frozen=True)
class CudnnFacts:
    """cuDNN's autotuner as the script left it."""

    technique: ClassVar[str] = "cudnn"

    cudnn_benchmark: bool = False
    """``torch.backends.cudnn.benchmark`` at the end of the warm-up."""


def _probe(ctx: ProbeContext) -> CudnnFacts:
    return CudnnFacts(cudnn_benchmark=bool(torch.backends.cudnn.benchmark))


_CUDNN_BENCHMARK_FACTOR = 1.15  # autotuned vs heuristic conv algorithms (assumed)


def cudnn_benchmark(facts: Facts, *, compute_pct: float = 50.0) -> Finding | None:
    """A conv net on CUDA with forward+backward at least ``compute_pct`` percent of the step and
    cuDNN's autotuner off: it picks conv algorithms by heuristic instead of by timing them."""
    f = cuda_conv_compute_share(facts, compute_pct)
    if f is None or facts.seen(CudnnFacts).cudnn_benchmark:
        return None
    speedup = amdahl(f, _CUDNN_BENCHMARK_FACTOR)
    return Finding(
        id="cudnn.benchmark",
        title="Convolutions use cuDNN's heuristic algorithm choice; let it benchmark them",
        evidence={"compute_pct": r(f * 100, 1), "has_conv2d": "true", "cudnn_benchmark": "false"},
        fix=Overlay.of(CudnnConfig, benchmark=True),
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, "
                f"s = {_CUDNN_BENCHMARK_FACTOR} (assumed)",
        notes=["Pays off when input shapes are fixed; each new shape is benchmarked again "
               "and the first steps are slower."],
    )


TECHNIQUE = Technique(
    name="cudnn",
    title="cuDNN autotuner",
    after=('cpu',),
    placed='a process-wide switch, set with the others before the model is touched',
    section=CudnnConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(at_start=_nocode_start),
    levers=(Lever("cudnn", "cuDNN autotuner (cudnn.benchmark)", Parity.EXACT, _propose, ("cudnn.benchmark",),
                  priority=95),),
    spell=_spell,
    facts=CudnnFacts,
    probe=_probe,
    rules=(Rule("cudnn.benchmark", cudnn_benchmark),),
)
