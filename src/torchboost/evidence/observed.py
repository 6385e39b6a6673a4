"""Facts: what the observer saw in a training run, as plain JSON-able data.

This is the contract between :mod:`torchboost.observe` (which records it from a live
process) and :mod:`torchboost.diagnose.rules` (which reads it without running
anything). Times are in milliseconds, memory in bytes, unless a name says otherwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar

from torchboost.evidence.evaluation_facts import EvaluationFacts
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.trainer_facts import TrainerFacts
from torchboost.evidence.quick_probe import QuickProbeFacts

T = TypeVar("T")

__all__ = ["EvaluationFacts", "Facts", "HOST_PARTS", "HOST_PHASES", "HostFacts", "LoaderFacts", "ModelFacts", "OptimizerFacts", "ProfileFacts", "QuickProbeFacts", "StepRecord",
           "TrainerFacts", "optimizer_label", "register_facts", "seen_in"]

PHASES = ("data", "forward", "backward", "optimizer", "checkpoint", "output", "other")
"""The parts of a training step, in order; ``breakdown_pct`` has one entry per phase.
"checkpoint" (``torch.save``) and "output" (printing and logging) are the host's calls
timed outside the loop's phases (:mod:`torchboost.evidence.host_side`); "other" is the rest."""

HOST_PARTS = ("checkpoint", "output")
"""The phases carved out of the host's time outside the loop's phases: the reports show
each only where it was measured."""

HOST_PHASES = (*HOST_PARTS, "other")
"""The step's host time outside data, forward, backward and optimizer: what "other" held
before checkpoint writes and output were carved out of it."""


_FACT_KINDS: dict[str, type] = {}
"""Each technique's facts class by technique name (registered by the technique registry)."""


def register_facts(kind: type) -> type:
    """Record ``kind`` (a frozen dataclass with ``technique: ClassVar[str]``) so that
    :meth:`Facts.from_dict` rebuilds its JSON as that class."""
    if not dataclasses.is_dataclass(kind) or not isinstance(getattr(kind, "technique", None), str):
        raise TypeError(f"{kind.__name__}: a technique's facts are a dataclass with `technique: ClassVar[str]`")
    if kind.technique in {f.name for f in dataclasses.fields(Facts)}:  # type: ignore[attr-defined]
        raise TypeError(f"{kind.__name__}: technique facts named {kind.technique!r} would hide Facts' own field")
    _FACT_KINDS[kind.technique] = kind  # type: ignore[attr-defined]
    return kind


def optimizer_label(entry: Mapping[str, Any]) -> str:
    """An entry of :attr:`Facts.optimizers` in words: "Adam (generator)", or its class alone."""
    stepping = entry.get("stepping")
    return f"{entry['class_name']} ({stepping})" if stepping else str(entry["class_name"])


def seen_in(by_technique: Mapping[str, Any], kind: type[T]) -> T:
    """The facts of ``kind`` (a technique's facts class, whose ``technique`` names it) in
    ``by_technique``: the object, or rebuilt from its JSON dict; defaults when absent."""
    value = by_technique.get(kind.technique)  # type: ignore[attr-defined]
    if isinstance(value, kind):
        return value
    names = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    return kind(**{k: v for k, v in (value or {}).items() if k in names})


@dataclass
class StepRecord:
    """One observed training step, phase times in milliseconds.

    The phases after ``total_ms`` are in the order of the observer's accumulators
    (:mod:`torchboost.observe.record.phases`). An evaluation pass the script runs between
    its training steps (a trained module called with gradients off: ``torch.no_grad()``,
    ``inference_mode``, and whatever runs until training resumes) is no part of the step:
    its time is ``eval_ms``, outside ``total_ms`` and every phase."""

    index: int
    total_ms: float
    data_ms: float = 0.0
    forward_ms: float = 0.0
    backward_ms: float = 0.0
    optimizer_ms: float = 0.0
    checkpoint_ms: float = 0.0
    """``torch.save`` calls outside the other phases, milliseconds."""
    output_ms: float = 0.0
    """Printing and logging outside the other phases (print, logging records, writes to
    sys.stdout and sys.stderr), milliseconds."""
    eval_ms: float = 0.0
    """Evaluation run within this step's span, milliseconds; not in ``total_ms``."""

    @property
    def other_ms(self) -> float:
        """Whatever the phases do not account for (user code, syncs)."""
        known = (self.data_ms + self.forward_ms + self.backward_ms + self.optimizer_ms + self.checkpoint_ms
                 + self.output_ms)
        return max(0.0, self.total_ms - known)


@dataclass
class LoaderFacts:
    """The DataLoader seen feeding the loop (the one whose batches reached backward most)."""

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
    workers_refused: str | None = None
    """Why worker processes cannot start for it here, in words (its workers start by spawn
    and something does not survive it: :mod:`torchboost.techniques.loader.spawn_safety`);
    None when they can."""
    samples: dict[str, float] = field(default_factory=dict)
    """Its batches timed where made, summed (:mod:`torchboost.reach.sample_clock`; read as
    :class:`~torchboost.techniques.loader.sample_split.SampleSplit`); {}: not timed."""


@dataclass
class ModelFacts:
    """The root module(s) whose forward the loop calls."""

    class_name: str = ""
    parameters: int = 0
    trainable_parameters: int = 0
    param_dtypes: list[str] = field(default_factory=list)
    device: str = "cpu"
    compiled: bool = False
    """The root module is a ``torch.compile`` wrapper (the script compiles it itself)."""
    has_conv2d: bool = False


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
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    """The window's phases ("data", "forward", "backward", "optimizer"; "step": the whole step),
    ms per step: {"wall_ms", "op_ms" (its outermost ops), "collective_ms" (collectives with no op
    of the training thread beside them)}; {} from an older writer or a trace."""


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
    techniques: dict[str, Any] = field(default_factory=dict)
    """Each technique's own facts (what its probe read of the live objects: autocast,
    channels_last...), by technique name; read them with :meth:`seen`, or as
    ``facts.precision``; in the JSON each is a key of its own, the technique's name."""
    optimizer: OptimizerFacts | None = None
    profile: ProfileFacts | None = None
    optimizers: list[dict[str, Any]] = field(default_factory=list)
    """Every optimizer seen stepping, in the order each first stepped: ``{"class_name",
    "stepping" (what it steps in words: the module holding its parameters, "generator";
    None when unknown), "steps" (its outermost step() calls), "primary" (its steps are the
    training steps)}``. Two or more: a second optimizer (a GAN's) stepped too; ``optimizer``
    is the primary. :func:`optimizer_label` names one."""
    cpu_threads: int = 1
    """torch.get_num_threads() in the training process."""
    other_load_pct: float | None = None
    """Other processes' CPU use during the recorded steps, % of the machine; None: not measured."""
    peak_memory_bytes: int = 0
    device_memory_total_bytes: int = 0
    """Accelerator memory (CUDA), or 0 on CPU."""
    peak_rss_bytes: int = 0
    losses: list[float] = field(default_factory=list)
    """Loss values per observed step, where the backward's tensor was a scalar."""
    ended: str = "stopped"
    """"stopped" (after N steps), "finished" (script ended on its own), "crashed",
    "stalled" (no step for too long: see ``stall``), "killed" (by a signal: see ``signal``),
    "exited" (the script ended its process itself, ``os._exit``: the facts were last written
    before, and ``exit_code`` and ``steps_seen`` are what the parent saw at its end)."""
    exit_code: int = 0
    planned_steps: int | None = None
    """Steps the script would run in full, when known (see ``planned_from``)."""
    planned_from: str | None = None
    """What gave ``planned_steps``, in words ("one epoch of the script's DataLoader",
    "the script's --max_iters=400", "the Trainer's max_steps=40")."""
    target_steps: int | None = None
    recording_ended: str = ""
    """Where and why recording ended, in words ("6 steps in 21.0 s: the median step known within 3.1%")."""
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
    loss_steps: list[int] = field(default_factory=list)
    """The step of each loss in ``warmup_losses`` then ``losses``, counted from 0 as the
    script's loop counts its optimizer steps (the profiled steps of a ``--full`` run have
    none); [] from an older writer. :meth:`loss_step` reads it."""
    uses_booster: bool = False
    """The script prepared a torchboost.Booster (every lever can then apply through it)."""
    frameworks: list[str] = field(default_factory=list)
    """Training frameworks the script runs its loop with: "transformers" (a Hugging Face
    Trainer: see ``trainer``), "lightning", "accelerate"."""
    trainer: TrainerFacts | None = None
    """The Hugging Face Trainer driving the loop and its TrainingArguments, when one does."""
    applied: list[str] = field(default_factory=list)
    """Settings applied to the script from outside (tune trials, ``torchboost run``), in words."""
    observer_errors: list[str] = field(default_factory=list)
    """Failures inside the observer itself (recorded, never raised into the script)."""
    profile_error: str | None = None
    """Why the profiler window could not run, when it could not."""
    stopped_slow: bool = False
    """A tuning trial stopped early: its first steps were already far slower than the
    configuration it was measured against (see ``ObserveSpec.stop_slower_than_ms``)."""
    stopped_decided: str | None = None
    """"faster" or "slower": a tuning trial stopped once its steps decided its ratio to the
    incumbent beyond noise (see ``ObserveSpec.stop_decided_ms``); None: it ran its steps."""
    stall: dict[str, Any] | None = None
    """{doing, after_s, limit_s, at_step} when the stall watchdog ended the run."""
    signal: str | None = None
    """The signal that killed the script ("SIGKILL"), when one did."""
    rank: int = 0
    """This process's rank under torchrun (RANK), 0 alone."""
    world_size: int = 1
    """Processes in the job (WORLD_SIZE), 1 alone."""
    process: str | None = None
    """The process observed, when the command started it itself (a wrapper's python, a
    launcher's worker, a spawned rank): "pid N (its command line)"."""
    gpu: dict[str, Any] | None = None
    """:class:`torchboost.diagnose.gpu.GpuFacts` as a dict, from a trace with device events."""
    micro_steps_per_step: float | None = None
    """Median backward passes per optimizer step (a closure's evaluations count as one):
    K under gradient accumulation over K micro-batches; None when steps are counted by
    backward."""
    flops_per_step: int | None = None
    """FLOPs of one training step, forward, backward and optimizer, as
    ``torch.utils.flop_counter.FlopCounterMode`` counts them (matmuls, convolutions,
    attention), in one unrecorded step after the recorded ones; None when not counted."""
    flops_by_op: dict[str, int] = field(default_factory=dict)
    """Those FLOPs by aten op (the largest few)."""
    bytes_by_op: dict[str, int] = field(default_factory=dict)
    """Bytes each aten op of the same step read and wrote (its tensors' sizes, in and out;
    the largest few): the roofline's traffic."""
    flops_error: str | None = None
    """Why the FLOPs could not be counted, when they could not."""
    random_ops: list[str] = field(default_factory=list)
    """The same step's aten ops that draw random numbers ("aten.bernoulli_": dropout)."""
    replay_step_ms: list[float] = field(default_factory=list)
    """Total time of each replay step: steps after the profiler window fed with batches
    already seen, re-served from memory (no loader work); [] when none ran."""
    quick_probes: list[QuickProbeFacts] = field(default_factory=list)
    """The quick probes: each finding's switch timed against plain steps after the profiler
    window (:mod:`torchboost.observe.probes.quick`); their steps are in no other figure."""
    host: HostFacts | None = None
    """Checkpoint writes (each one's step, time and bytes) and output calls timed outside the
    loop's phases; None where not observed (a trace)."""
    evaluation: EvaluationFacts | None = None
    """The evaluation calls between the training steps; None where not observed."""

    def loss_step(self, position: int) -> int:
        """The script's step (from 0) of the loss at ``position`` in ``warmup_losses`` then
        ``losses``; the position itself when the steps were not recorded."""
        steps = self.loss_steps
        return steps[position] if len(steps) == len(self.warmup_losses) + len(self.losses) else position

    def __getattr__(self, name: str) -> Any:
        # ``facts.precision``: a technique's facts by its name, as in the JSON.
        kind = _FACT_KINDS.get(name)
        if kind is None or name.startswith("_"):
            raise AttributeError(f"Facts has no field or technique facts {name!r}")
        return seen_in(self.__dict__.get("techniques") or {}, kind)

    def seen(self, kind: type[T]) -> T:
        """The facts of ``kind``, a technique's facts class (its ``technique`` names it);
        its defaults (nothing seen) when that technique's probe did not run."""
        return seen_in(self.techniques, kind)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able nested dicts; each technique's facts under the technique's own name."""
        data = dataclasses.asdict(self)
        by_technique = data.pop("techniques")
        return {**data, **by_technique}

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
            "optimizer": OptimizerFacts,
            "profile": ProfileFacts,
            "trainer": TrainerFacts,
            "host": HostFacts,
            "evaluation": EvaluationFacts,
        }
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {"techniques": {key: build(_FACT_KINDS[key], value) for key, value in data.items()
                                                 if key in _FACT_KINDS and key not in names}}
        for key, value in data.items():
            if key not in names:
                continue
            if key in nested:
                kwargs[key] = build(nested[key], value)
            elif key == "steps":
                kwargs[key] = [build(StepRecord, s) for s in value]
            elif key == "quick_probes":
                kwargs[key] = [build(QuickProbeFacts, q) for q in value]
            else:
                kwargs[key] = value
        return cls(**kwargs)
