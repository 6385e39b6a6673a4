"""The levers the tuner can pull, and the candidate settings each one proposes.

A lever is one technique (or a set of coupled knobs, like loader workers and intra-op
threads, which compete for the same cores and must move together). Given the settings
kept so far and what is known about the script and machine, it proposes a few candidate
settings to measure. Settings are dotted ``torchboost.toml`` keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from torchboost.tune.parity import EXACT, REDUCED, STATISTICAL

__all__ = ["Lever", "TuneContext", "default_levers", "order_levers"]

Settings = dict[str, Any]


@dataclass(frozen=True)
class TuneContext:
    """What the tuner knows before it starts: machine and script facts, plain data."""

    device: str = "cpu"
    cpu_cores: int = 1
    cpu_bf16: bool = False
    cuda_bf16: bool = False
    tf32: bool = False
    can_compile: bool = True
    iterable_dataset: bool = False
    has_loader: bool = True
    has_optimizer: bool = True
    uses_booster: bool = False
    """The script calls Booster.prepare: every lever applies through it (fp16 too)."""
    max_workers: int = 4
    """Upper bound on loader workers to try."""
    has_conv2d: bool = True
    """The model has 2-D convolutions (channels_last can matter)."""
    file_system_sharing: bool = True
    """The platform offers torch's file_system sharing strategy for worker batches."""


@dataclass(frozen=True)
class Lever:
    """One technique the tuner may keep or revert as a whole."""

    id: str
    title: str
    parity: str
    """EXACT (fp32 maths unchanged) or REDUCED (lower precision)."""
    propose: Callable[[Settings, TuneContext], list[Settings]]
    """Changes to try on top of the incumbent settings (an empty list: not applicable)."""
    finding_ids: tuple[str, ...] = field(default=())
    """Doctor findings whose expected speedup ranks this lever."""
    is_compile: bool = False
    """Compile cost is amortised over the planned run before it is kept."""
    coupled: bool = False
    """Its candidates move several knobs together (workers and threads): its runners-up
    are tried again with the levers not kept alone, in the interaction pass."""
    fallback_parity: str | None = None
    """A looser check when ``parity`` fails: loader workers seed their own random
    augmentations, so the same samples come out with other random draws."""
    subject: Callable[[Settings], str] | None = None
    """What a reader calls one of its candidates ("bf16"); None: the lever's title."""


def _host(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    # Workers and intra-op threads share the cores: on a 2-core box, 2 workers with
    # 2 threads gained nothing and 1 worker with 2 threads lost 50%, while 2 workers with
    # 1 thread gained 1.35x. So each worker count is tried with threads = the cores left
    # over, and with all cores.
    # Fewer threads alone is a candidate too: on a busy or small box, intra-op threads
    # that spin-wait for each other can cost more than they bring.
    out: list[Settings] = [{"cpu.threads": t} for t in sorted({1, ctx.cpu_cores // 2}) if 0 < t < ctx.cpu_cores]
    if not ctx.has_loader or ctx.iterable_dataset:
        return out
    # How workers hand batches over is coupled to their number too: on 2 cores, 2 workers
    # lost to 1 with torch's default hand-over and beat it with file_system.
    sharings = [{}, {"loader.sharing_strategy": "file_system"}] if ctx.file_system_sharing else [{}]
    for workers in range(1, min(ctx.max_workers, max(ctx.cpu_cores, 1)) + 1):
        threads_options = sorted({max(1, ctx.cpu_cores - workers), ctx.cpu_cores})
        for threads in threads_options:
            for sharing in sharings:
                out.append({"loader.num_workers": workers, "loader.persistent_workers": True,
                            "cpu.threads": threads, **sharing})
    return out


def _prefetch(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    if int(incumbent.get("loader.num_workers", 0) or 0) == 0:
        return []
    return [{"loader.prefetch_factor": 4}]


def _sharing(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    # With busy CPU workers, torch's default hand-over (a file descriptor fetched over a
    # socket from a worker thread that needs the worker's GIL) stalls the training loop;
    # on 2 cores file_system measured 7-13% faster per step with 2 workers.
    if int(incumbent.get("loader.num_workers", 0) or 0) == 0 or not ctx.file_system_sharing:
        return []
    if incumbent.get("loader.sharing_strategy") == "file_system":  # kept with the workers
        return []
    return [{"loader.sharing_strategy": "file_system"}]


def _pin(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    return [{"loader.pin_memory": True}] if ctx.device == "cuda" and ctx.has_loader else []


def _precision(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    if ctx.device == "cuda":
        if ctx.cuda_bf16:
            return [{"precision.mode": "bf16"}]
        return [{"precision.mode": "fp16"}] if ctx.uses_booster else []
    # On a CPU bf16 is tried even without bf16 instructions: the measurement, not the
    # flag, decides, and the report then says how much slower it was.
    return [{"precision.mode": "bf16"}]


def _tf32(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    return [{"precision.mode": "tf32"}] if ctx.tf32 and "precision.mode" not in incumbent else []


def _mode_name(change: Settings) -> str:
    # A precision candidate is named by its mode: "bf16", "tf32".
    return str(next(iter(change.values())))


def _compile(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    return [{"compile.mode": "default"}] if ctx.can_compile else []


def _optimizer(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    return [{"optimizer.implementation": "fused"}, {"optimizer.implementation": "foreach"}] if ctx.has_optimizer else []


def _channels_last(incumbent: Settings, ctx: TuneContext) -> list[Settings]:
    # Only through the Booster (the inputs are converted too), and on any device: on a
    # 2-core CPU the vision workload's tune kept it at 1.06x (benchmarks/RESULTS.md).
    return [{"memory.channels_last": True}] if ctx.uses_booster and ctx.has_conv2d else []


def default_levers() -> list[Lever]:
    """Every lever, in the default order used when the doctor has no finding for them."""
    return [
        Lever("host", "loader workers + CPU threads", EXACT, _host,
              ("data.workers", "threads.oversubscribed", "data.persistent_workers"),
              coupled=True, fallback_parity=STATISTICAL),
        Lever("sharing", "worker batch hand-over (file_system)", EXACT, _sharing, ("data.workers",),
              fallback_parity=STATISTICAL),
        Lever("precision", "lower precision (autocast)", REDUCED, _precision,
              ("precision.lower", "precision.slower_on_cpu"), subject=_mode_name),
        Lever("tf32", "TF32 matmuls", REDUCED, _tf32, ("precision.lower",), subject=_mode_name),
        Lever("compile", "torch.compile", EXACT, _compile, ("compile.enable",), is_compile=True),
        Lever("optimizer", "fused/foreach optimizer", EXACT, _optimizer, ("optimizer.fused",)),
        Lever("pin_memory", "pinned host memory", EXACT, _pin, ("data.pin_memory",)),
        Lever("prefetch", "deeper prefetch", EXACT, _prefetch, (), fallback_parity=STATISTICAL),
        Lever("channels_last", "channels_last memory format", EXACT, _channels_last, ("memory.channels_last",)),
    ]


def order_levers(levers: list[Lever], expected_speedup: dict[str, float]) -> list[Lever]:
    """Largest expected gain first (from the doctor's findings by id); the rest keep their order."""

    def gain(lever: Lever) -> float:
        return max((expected_speedup.get(fid, 1.0) for fid in lever.finding_ids), default=1.0)

    ranked = sorted(enumerate(levers), key=lambda item: (-gain(item[1]), item[0]))
    return [lever for _, lever in ranked]
