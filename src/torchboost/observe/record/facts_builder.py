"""The one place the observed run's :class:`Facts` are built, and its live objects described.

:func:`build_facts` describes the script's model and optimizer (``describe_model``,
``describe_optimizer``), asks each technique's probe for its own facts
(``probe_techniques``: autocast, compiled, channels_last...), and puts them with
everything the recorder's parts measured into one ``Facts``. What a technique needs to
know of the script's live objects is its probe's to read, not this module's.

It is given the parts themselves (:class:`RecordedParts`: step timing, loss capture, the
script's objects, the run's stages, and the run's own
:class:`RunState`), never the recorder. The facts built so
far are kept by :class:`~torchboost.observe.record.facts_so_far.FactsSoFar`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from torchboost import env as _env
from torchboost.evidence.observed import Facts, LoaderFacts, ModelFacts, TrainerFacts
from torchboost.observe.probes import describe
from torchboost.observe.probes.run_length import length_from_arguments, script_arguments
from torchboost.observe.probes.stated_length import Stated
from torchboost.observe.record.host_log import HostLog
from torchboost.observe.record.loss_capture import LossCapture
from torchboost.observe.record.script_objects import ScriptObjects
from torchboost.observe.record.stages import RunStages
from torchboost.observe.record.step_timing import StepTiming
from torchboost.observe.spec import ObserveSpec
from torchboost.plan import Bursts
from torchboost.reach import sample_clock
from torchboost.techniques.registry import ProbeContext

__all__ = ["RecordedParts", "RunState", "build_facts", "planned_run", "probe_context", "uses_cuda"]


@dataclass
class RunState:
    """What is the run's own, beside what its parts measured: set by the recorder, the
    bootstrap and the watchdog, read by the facts."""

    step_source: str = "backward"
    """What marks a step: "backward", or "optimizer" once an optimizer stepped."""
    ended: str = "finished"
    """How the run ended: "finished", "stopped", "crashed", "killed", "stalled"."""
    stall: dict[str, Any] | None = None
    """What the stall watchdog saw when it ended the run."""
    signal: str | None = None
    """The signal that ended the run, when one did."""
    applied: list[str] = field(default_factory=list)
    """Settings applied from outside, in words (filled by the bootstrap)."""
    started_at: float = field(default_factory=time.time)
    """When observation began (wall clock): what the process did before is not this run's."""
    place: tuple[int, int] | None = None
    """(rank, world size) from torch.distributed, as last seen initialised."""


@dataclass(frozen=True)
class RecordedParts:
    """What the facts are built from: the recorder's parts and the run's own state (never
    the recorder itself)."""

    spec: ObserveSpec
    timing: StepTiming
    losses: LossCapture
    seen: ScriptObjects
    stages: RunStages
    run: RunState
    errors: list[str]
    """The observer's failures so far, which the facts report; the builder's own are added."""
    host: HostLog = field(default_factory=HostLog)
    """The checkpoint writes and output calls timed outside the phases."""
    bursts: Bursts | None = None
    """A burst trial's switches, from the plan handed over; None: none."""


def uses_cuda(model: ModelFacts | None, probe_started_cuda: bool) -> bool:
    """The script trains on CUDA: its model is there, or (model unknown yet) it started CUDA.

    Never ``torch.cuda.is_available()``: the observer must not be the one to start CUDA,
    and our probe at the end of warm-up may have; that does not make a CPU run a GPU one.
    """
    if model is not None:
        return model.device.startswith("cuda")
    return torch.cuda.is_initialized() and not probe_started_cuda


def planned_run(loader: LoaderFacts | None, trainer: TrainerFacts | None,
                command: Sequence[str] = (), micro_steps: float | None = None,
                stated: Stated = Stated()) -> tuple[int | None, str | None]:
    """Optimizer steps the script would run in full, and what gave them in words: a Hugging
    Face Trainer's own length (``max_steps``, or its epochs) or a Lightning one's, else the script's arguments
    (``--max_iters=400``, ``--epochs 3`` with the loader's length), else what the script
    set itself (``stated``: an argparse default, a config's ``max_iters``), else one epoch of the
    loader. ``micro_steps``: backward passes per optimizer step (a script accumulating by
    hand over 4 batches runs 512 batches in 128 steps); a count of batches is divided by it."""
    batches = loader.num_batches if loader is not None else None
    if trainer is not None:
        steps, words = trainer.run_length(batches)
        if steps:
            return steps, words
    if stated.trainer is not None:  # a Lightning Trainer's own plan
        return stated.trainer[1], stated.trainer[0]
    per_step = round(micro_steps) if micro_steps and micro_steps >= 1.5 else 1
    given = length_from_arguments(script_arguments(command), batches, per_step, stated)
    if given is not None:
        return given
    if not batches:
        return None, None
    if per_step > 1:
        return (max(1, batches // per_step),
                f"one epoch of the script's DataLoader: {batches} batches, {per_step} to an optimizer step")
    return batches, "one epoch of the script's DataLoader"


def probe_context(parts: RecordedParts, device: str) -> ProbeContext:
    """The script's live objects as a technique's probe (or quick probe) gets them; ``device``:
    the model's ("cuda:0")."""
    seen = parts.seen
    load = parts.timing.window.load
    return ProbeContext(model=seen.model(), optimizer=seen.primary_optimizer(), loader=None,
                        device=device.split(":")[0], autocast_dtype=seen.autocast_dtype(device),
                        grad_scaler=parts.losses.scaler is not None,
                        other_load_pct=load.pct if load.measured else None, wanted=parts.bursts.change if parts.bursts else {},
                        host_lines=tuple(parts.host.lines.lines()) if parts.host.lines is not None else ())


def _described(parts: RecordedParts, earlier: Facts | None, fresh: bool) -> tuple[Any, Any, dict[str, Any]]:
    """The model, the optimizer and each technique's own facts (its probe's), from the live
    objects when there is nothing earlier or ``fresh``; else ``earlier``'s."""
    seen = parts.seen
    model = earlier.model if earlier is not None else None
    optimizer = earlier.optimizer if earlier is not None else None
    by_technique = dict(earlier.techniques) if earlier is not None else {}
    if model is not None and not fresh:
        return model, optimizer, by_technique
    try:
        module = seen.model()
        if module is not None:
            model = describe.describe_model(module)
        device = model.device if model else "cpu"
        live = seen.primary_optimizer()
        if live is not None:
            optimizer = describe.describe_optimizer(live, device)
        by_technique = describe.probe_techniques(probe_context(parts, device), parts.errors)
    except Exception as exc:  # noqa: BLE001 - the observer never breaks the user's run
        parts.errors.append(f"build_facts: {type(exc).__name__}: {exc}")
    return model, optimizer, by_technique


def _timed(loader: LoaderFacts | None) -> LoaderFacts | None:
    """``loader`` with its batches' times so far (:mod:`torchboost.reach.sample_clock`)."""
    clock = sample_clock.latest()
    samples = clock.samples_of(loader) if loader is not None and clock is not None else {}
    return dataclasses.replace(loader, samples=samples) if samples else loader


def build_facts(parts: RecordedParts, uses_booster: bool, earlier: Facts | None = None, *,
                fresh: bool = False) -> Facts:
    """Everything ``parts`` have seen so far, as :class:`Facts` (converts pending losses: may sync).

    The model and optimizer are described from the live objects when ``earlier`` (facts
    built before) has no model yet, or when ``fresh``; otherwise ``earlier``'s descriptions
    are kept, since the script's objects may be gone by the end of the run. The builder
    builds with ``fresh`` at the end of warm-up, when the script has set them up.
    """
    seen, timing, spec, run, stages = parts.seen, parts.timing, parts.spec, parts.run, parts.stages
    model, optimizer, by_technique = _described(parts, earlier, fresh)
    try:
        by_technique = {**by_technique, **describe.observe_techniques(run.started_at)}
    except Exception as exc:  # noqa: BLE001 - the observer never breaks the user's run
        parts.errors.append(f"observe_techniques: {type(exc).__name__}: {exc}")
    settings = seen.settings
    loader = _timed(seen.main_loader())
    cuda = uses_cuda(model, seen.probe_started_cuda)
    micro = timing.micro_median() if run.step_source == "optimizer" else None
    planned_steps, planned_from = planned_run(loader, seen.trainer, spec.command, micro, seen.stated)
    run.place = _env.job_place() or run.place  # kept: a script may end its process group before the last write
    rank, world_size = run.place or (spec.rank, _env.world_size())
    return Facts(
        # What the script is and the machine it ran on.
        env=settings.get("env", {}), command=list(spec.command), rank=rank, world_size=world_size,
        frameworks=describe.frameworks(trainer=seen.trainer is not None), trainer=seen.trainer,
        uses_booster=uses_booster, applied=list(run.applied),
        # Its objects and settings.
        loader=loader,
        model=model,
        optimizer=optimizer,
        optimizers=seen.optimizer_steps.facts(),
        techniques=by_technique,
        cpu_threads=settings.get("cpu_threads", torch.get_num_threads()),
        other_load_pct=round(timing.window.load.pct, 1) if timing.window.load.measured else None,
        # What was measured.
        steps=list(timing.steps), warmup_steps=timing.window.start, step_source=run.step_source,
        warmup_step_ms=list(timing.warmup_ms), steps_seen=timing.boundaries,
        planned_steps=planned_steps, planned_from=planned_from,
        target_steps=None if spec.full else timing.window.end - timing.window.start,
        recording_ended=timing.window.why,
        micro_steps_per_step=micro,
        losses=parts.losses.values(), warmup_losses=parts.losses.warmup_values(),
        loss_steps=list(parts.losses.steps),
        profile=stages.profile.facts, gpu=stages.profile.gpu,
        profile_error=stages.profile.error,
        flops_per_step=stages.flops.flops, flops_by_op=dict(stages.flops.by_op),
        bytes_by_op=dict(stages.flops.bytes_by_op), random_ops=list(stages.flops.random_ops),
        flops_error=stages.flops.error or stages.flops.note,
        replay_step_ms=list(stages.replay.step_ms), quick_probes=list(stages.quick.results),
        host=parts.host.facts(), evaluation=timing.evaluation.watch.facts,
        peak_memory_bytes=int(torch.cuda.max_memory_allocated()) if cuda else describe.peak_rss_bytes(),
        device_memory_total_bytes=int(settings.get("env", {}).get("gpu_memory_bytes", 0)) if cuda else 0,
        peak_rss_bytes=describe.peak_rss_bytes(),
        # How it ended.
        ended=run.ended, stopped_slow=timing.stopped_slow, stopped_decided=timing.stopped_decided, stall=run.stall, signal=run.signal,
        observer_errors=list(parts.errors),
    )
