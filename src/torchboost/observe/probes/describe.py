"""Turn live objects (DataLoader, module, optimizer, torch settings) into plain facts.

Called rarely (once per epoch for a loader, once at the end of warm-up for the rest),
never per step, so these may walk parameters.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch

from torchboost.evidence.observed import LoaderFacts, ModelFacts, OptimizerFacts
from torchboost.reach import frames, sample_clock
from torchboost.techniques._model import has_conv2d
from torchboost.techniques.loader.spawn_safety import spawn_refusal
from torchboost.techniques.optimizer import FUSED_DEVICES, fused_kernel_on
from torchboost.techniques.registry import ProbeContext, techniques

__all__ = [
    "describe_loader",
    "describe_model",
    "describe_optimizer",
    "observe_techniques",
    "probe_techniques",
    "peak_rss_bytes",
    "find_grad_scaler",
    "self_on_stack",
]


def _safe_len(obj: Any) -> int | None:
    try:
        return int(len(obj))
    except Exception:  # IterableDataset without __len__, samplers that refuse
        return None


def describe_loader(loader: torch.utils.data.DataLoader) -> LoaderFacts:
    """The settings of ``loader`` that decide how fast it feeds the loop."""
    batch_size = loader.batch_size
    if batch_size is None:  # a custom batch_sampler carries the size
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
    iterable = isinstance(loader.dataset, torch.utils.data.IterableDataset)
    facts = LoaderFacts(
        num_workers=int(loader.num_workers),
        pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
        batch_size=batch_size,
        iterable=iterable,
        dataset_len=_safe_len(loader.dataset),
        num_batches=_safe_len(loader),
        workers_refused=None if loader.num_workers else spawn_refusal(
            loader.dataset, loader.multiprocessing_context, collate_fn=loader.collate_fn,
            worker_init_fn=loader.worker_init_fn),
    )
    clock = sample_clock.latest()
    if clock is not None:  # its batches' times are read into these facts when they are written
        clock.described(facts, loader)
    return facts


def describe_model(module: torch.nn.Module) -> ModelFacts:
    """Size, dtypes and device of a root module (what a technique reads of it is its own
    probe's: :func:`probe_techniques`)."""
    inner = getattr(module, "_orig_mod", module)  # torch.compile's OptimizedModule wraps it
    params = list(inner.parameters())
    devices = sorted({str(p.device) for p in params}) or ["cpu"]
    return ModelFacts(
        class_name=type(inner).__name__,
        parameters=sum(p.numel() for p in params),
        trainable_parameters=sum(p.numel() for p in params if p.requires_grad),
        param_dtypes=sorted({str(p.dtype).removeprefix("torch.") for p in params}),
        device=devices[0],
        compiled=inner is not module or _is_compiled(module),
        has_conv2d=has_conv2d(inner),  # ConvTranspose2d counts too: one definition, techniques._model
    )


def _is_compiled(module: torch.nn.Module) -> bool:
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # absent: nothing was compiled
    optimized = getattr(eval_frame, "OptimizedModule", None)
    return optimized is not None and isinstance(module, optimized)


def probe_techniques(ctx: ProbeContext, errors: list[str] | None = None) -> dict[str, Any]:
    """Each technique's own facts, read by its probe from the live objects, by technique name.

    With ``errors``, a probe that raises is left out (its technique then reads as nothing
    seen) and why is appended there, the other techniques' facts kept; without, it raises."""
    found: dict[str, Any] = {}
    for technique in techniques():
        if technique.probe is None:
            continue
        try:
            found[technique.name] = technique.probe(ctx)
        except Exception as exc:  # noqa: BLE001 - one technique's probe never empties the others' facts
            if errors is None:
                raise
            errors.append(f"probe of {technique.name}: {type(exc).__name__}: {exc}")
    return found


def observe_techniques(since: float) -> dict[str, Any]:
    """Each technique's facts read from the process itself since ``since`` (``time.time()``;
    see ``Technique.observe``), by name."""
    return {t.name: t.observe(since) for t in techniques() if t.observe is not None}


def describe_optimizer(optimizer: torch.optim.Optimizer, device: str = "cpu") -> OptimizerFacts:
    """Class and multi-tensor settings of ``optimizer`` (from its defaults and first group)."""
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    merged = {**optimizer.defaults, **group}
    try:
        accepts_fused = "fused" in inspect.signature(type(optimizer).__init__).parameters
    except (TypeError, ValueError):
        accepts_fused = False
    # A subclass of torch's own (the script's tweak of AdamW) steps with its base's kernels.
    base = next((cls for cls in type(optimizer).__mro__ if cls in FUSED_DEVICES), None)
    return OptimizerFacts(
        class_name=type(optimizer).__name__,
        foreach=merged.get("foreach"),
        fused=merged.get("fused"),
        supports_fused=accepts_fused and base is not None and fused_kernel_on(base, device.split(":")[0]),
    )


def frameworks(*, trainer: bool = False) -> list[str]:
    """The training frameworks the script drives its loop with: "transformers" when a
    Hugging Face Trainer runs it (``trainer``: one was found), "lightning" once it imported
    Lightning, "accelerate" once it built an ``Accelerator`` itself (importing accelerate
    alone, as other libraries do, does not count, nor the one a Trainer builds)."""
    found = ["transformers"] if trainer else []
    if any(name in sys.modules for name in ("lightning.pytorch", "pytorch_lightning")):
        found.append("lightning")
    state = sys.modules.get("accelerate.state")
    if not trainer and state is not None and getattr(getattr(state, "PartialState", None), "_shared_state", None):
        found.append("accelerate")
    return found


def peak_rss_bytes() -> int:
    """Peak resident memory of this process, bytes (ru_maxrss is KiB on Linux, bytes on macOS).

    Where there is no ``resource`` module (Windows), psutil's peak working set, else
    the current resident size.
    """
    try:
        import resource  # here, not at the top: it does not exist on Windows
    except ImportError:
        import psutil  # the fallback, imported only where resource is missing

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", info.rss))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def find_grad_scaler(max_depth: int = 12) -> Any | None:
    """The GradScaler driving the current optimizer step, found on the call stack, or None.

    Called once, from the first optimizer step hook: ``GradScaler.step`` calls
    ``optimizer.step`` from one of its own methods, so a caller frame's ``self`` is it.
    """
    scaler_type = getattr(torch.amp, "GradScaler", None)
    return None if scaler_type is None else self_on_stack(scaler_type, max_depth)


def self_on_stack(kind: type, max_depth: int) -> Any | None:
    """The first ``self`` that is a ``kind`` in the frames above the caller's caller (up
    to ``max_depth`` of them), or None: the object whose method called down to here. Only
    the frames of ``kind``'s own methods are read (:func:`~torchboost.reach.frames.self_of`):
    the script's frames are left as they were."""
    codes = frames.method_codes(kind)
    frame = sys._getframe(2)
    for _ in range(max_depth):
        if frame is None:
            return None
        if frame.f_code in codes:
            candidate = frames.self_of(frame)
            if isinstance(candidate, kind):
                return candidate
        frame = frame.f_back
    return None
