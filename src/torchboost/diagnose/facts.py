"""Facts: what the observer saw in a training run, as plain JSON-able data.

This is the contract between :mod:`torchboost.observe` (which records it from a live
process) and :mod:`torchboost.diagnose.rules` (which reads it without running
anything). Times are in milliseconds, memory in bytes, unless a name says otherwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Facts",
    "LoaderFacts",
    "ModelFacts",
    "OptimizerFacts",
    "PrecisionFacts",
    "ProfileFacts",
    "StepRecord",
]

PHASES = ("data", "forward", "backward", "optimizer", "other")
"""The parts of a training step, in order; ``breakdown_pct`` has one entry per phase."""


@dataclass
class StepRecord:
    """One observed training step, phase times in milliseconds."""

    index: int
    total_ms: float
    data_ms: float = 0.0
    forward_ms: float = 0.0
    backward_ms: float = 0.0
    optimizer_ms: float = 0.0

    @property
    def other_ms(self) -> float:
        """Whatever the phases do not account for (logging, user code, syncs)."""
        known = self.data_ms + self.forward_ms + self.backward_ms + self.optimizer_ms
        return max(0.0, self.total_ms - known)


@dataclass
class LoaderFacts:
    """The DataLoader seen feeding the loop (the one iterated most)."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    batch_size: int | None = None
    iterable: bool = False
    """True for an IterableDataset (workers would duplicate an unsharded stream)."""
    dataset_len: int | None = None
    num_batches: int | None = None
    """len(loader), None when unknown (iterable)."""


@dataclass
class ModelFacts:
    """The root module(s) whose forward the loop calls."""

    class_name: str = ""
    parameters: int = 0
    trainable_parameters: int = 0
    param_dtypes: list[str] = field(default_factory=list)
    device: str = "cpu"
    compiled: bool = False
    has_conv2d: bool = False
    channels_last: bool = False
    """The conv weights are already in channels_last memory format."""


@dataclass
class PrecisionFacts:
    """Numeric settings in effect during forward."""

    autocast: bool = False
    autocast_dtype: str | None = None
    """"bfloat16" / "float16" when autocast was on, else None."""
    grad_scaler: bool = False
    tf32_matmul: bool = False
    """torch.backends.cuda.matmul.allow_tf32 or float32 matmul precision below "highest"."""
    cudnn_benchmark: bool = False


@dataclass
class OptimizerFacts:
    """The optimizer seen stepping."""

    class_name: str = ""
    foreach: bool | None = None
    fused: bool | None = None
    supports_fused: bool = False
    """The class accepts ``fused=True`` (Adam, AdamW, SGD, ...) on the model's device."""


@dataclass
class ProfileFacts:
    """What the bounded torch.profiler window saw."""

    steps: int = 0
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    """[{name, self_cpu_ms, self_device_ms, calls}] by self time, at most 20."""
    sync_count_per_step: float = 0.0
    """Host–device synchronisations per step (aten::_local_scalar_dense, stream/device syncs)."""
    sync_ops: dict[str, int] = field(default_factory=dict)
    trace_path: str | None = None
    """Chrome-trace JSON file, relative to the report folder."""
    collective_ms_per_step: float = 0.0
    """Time collectives (all-reduce, broadcast, all-gather...) ran per step, overlaps counted once."""
    collective_overlap_pct: float | None = None
    """Share of that time during which the training thread was computing (None: no collective)."""


@dataclass
class Facts:
    """Everything observed in one run. ``to_dict``/``from_dict`` round-trip through JSON."""

    env: dict[str, Any] = field(default_factory=dict)
    """torchboost.env.Environment.to_dict() of the observed process."""
    command: list[str] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    warmup_steps: int = 0
    step_source: str = "optimizer"
    """"optimizer" (optimizer step hooks) or "backward" (no optimizer object seen)."""
    loader: LoaderFacts | None = None
    model: ModelFacts | None = None
    precision: PrecisionFacts = field(default_factory=PrecisionFacts)
    optimizer: OptimizerFacts | None = None
    profile: ProfileFacts | None = None
    cpu_threads: int = 1
    """torch.get_num_threads() in the training process."""
    peak_memory_bytes: int = 0
    device_memory_total_bytes: int = 0
    """Accelerator memory (CUDA), or 0 on CPU."""
    peak_rss_bytes: int = 0
    losses: list[float] = field(default_factory=list)
    """Loss values per observed step, where the backward's tensor was a scalar."""
    ended: str = "stopped"
    """"stopped" (after N steps), "finished" (script ended on its own), "crashed",
    "stalled" (no step for too long: see ``stall``), "killed" (by a signal: see ``signal``)."""
    exit_code: int = 0
    planned_steps: int | None = None
    """Steps the script would run in full (len(loader) x epochs), when known."""
    target_steps: int | None = None
    """Steps the observer meant to record before stopping the script (its step bound),
    None when unbounded; with ``ended == "finished"`` and fewer steps, the script ended early."""
    cpu_bf16_speedup: float | None = None
    """fp32 time / bf16 time of a CPU matmul measured in the observed process
    (:func:`torchboost.env.measure_cpu_bf16_speedup`); above 1 means bf16 is faster here.
    None when not measured; rules then fall back on the CPU's bf16 instruction flags."""

    steps_seen: int = 0
    """Step boundaries seen, warm-up included."""
    warmup_step_ms: list[float] = field(default_factory=list)
    """Total time of each warm-up step (first-call and compile costs show here). When
    steps are counted by the optimizer, the first entry is the first step's forward and
    backward, up to its optimizer step, where a model compiled before training compiles."""
    warmup_losses: list[float] = field(default_factory=list)
    """Losses of the warm-up steps; with ``losses`` they give the run's losses from step 0."""
    uses_booster: bool = False
    """The script prepared a torchboost.Booster (every lever can then apply through it)."""
    frameworks: list[str] = field(default_factory=list)
    """Training frameworks the script runs its loop with: "lightning", "accelerate"."""
    applied: list[str] = field(default_factory=list)
    """Settings applied to the script from outside (tune trials, ``torchboost run``), in words."""
    observer_errors: list[str] = field(default_factory=list)
    """Failures inside the observer itself (recorded, never raised into the script)."""
    profile_error: str | None = None
    """Why the profiler window could not run, when it could not."""
    stopped_slow: bool = False
    """A tuning trial stopped early: its first steps were already far slower than the
    configuration it was measured against (see ``ObserveSpec.stop_slower_than_ms``)."""
    stall: dict[str, Any] | None = None
    """{doing, after_s, limit_s, at_step} when the stall watchdog ended the run."""
    signal: str | None = None
    """The signal that killed the script ("SIGKILL"), when one did."""
    rank: int = 0
    """This process's rank under torchrun (RANK), 0 alone."""
    world_size: int = 1
    """Processes in the job (WORLD_SIZE), 1 alone."""
    gpu: dict[str, Any] | None = None
    """:class:`torchboost.diagnose.gpu.GpuFacts` as a dict, from a trace with device events."""
    micro_steps_per_step: float | None = None
    """Median backward passes per optimizer step (a closure's evaluations count as one):
    K under gradient accumulation over K micro-batches; None when steps are counted by
    backward."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able nested dicts."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Facts":
        """Inverse of :meth:`to_dict`; unknown keys are ignored (newer writers)."""
        def build(kind: type, raw: Any) -> Any:
            if raw is None:
                return None
            names = {f.name for f in dataclasses.fields(kind)}
            return kind(**{k: v for k, v in raw.items() if k in names})

        nested = {
            "loader": LoaderFacts,
            "model": ModelFacts,
            "precision": PrecisionFacts,
            "optimizer": OptimizerFacts,
            "profile": ProfileFacts,
        }
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in names:
                continue
            if key in nested:
                kwargs[key] = build(nested[key], value)
            elif key == "steps":
                kwargs[key] = [build(StepRecord, s) for s in value]
            else:
                kwargs[key] = value
        return cls(**kwargs)
