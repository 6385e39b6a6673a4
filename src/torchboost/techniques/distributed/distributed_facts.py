"""What the doctor reads of a ``DistributedDataParallel`` wrapper: its settings and buckets.

Read once, at the end of the warm-up, from the root module the loop calls when it is a DDP
wrapper (the script's own, a framework's or the Booster's): the settings that decide how
its all-reduce runs (``find_unused_parameters``, ``static_graph``, ``bucket_cap_mb``) and
what DDP itself logged of the steps so far (its buckets, the parameters no gradient reached).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from torchboost.techniques.registry import ProbeContext

__all__ = ["DdpFacts", "probe_ddp"]


@dataclass(frozen=True)
class DdpFacts:
    """The DDP wrapper around the model, as the script made it; ``ddp`` False: none seen."""

    technique: ClassVar[str] = "distributed"

    ddp: bool = False
    """The root module the loop calls is a ``DistributedDataParallel``."""
    world_size: int = 1
    backend: str = ""
    """The process group's backend ("gloo", "nccl")."""
    find_unused_parameters: bool = False
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    comm_hook: bool = False
    """A communication hook replaces the plain all-reduce (compression, a custom reduce)."""
    bucket_cap_bytes: int = 25 * 2**20
    """``bucket_cap_mb`` in bytes."""
    bucket_bytes: list[int] = field(default_factory=list)
    """Each bucket's gradient bytes, in the order DDP reduces them (rebuilt after the first
    step where DDP rebuilt them); [] when DDP logged none."""
    grad_bytes: int = 0
    """The gradients DDP reduces, bytes."""
    largest_param_bytes: int = 0
    """The largest parameter's bytes: no bucket is smaller than the tensor it holds."""
    unused_param_bytes: int | None = None
    """Parameters no gradient reached in a step, bytes, as DDP's search of the graph found
    them (``find_unused_parameters=True``); None when not known."""


def _sizes(text: Any) -> list[int]:
    return [int(part) for part in str(text or "").replace(",", " ").split() if part.isdigit()]


def probe_ddp(ctx: ProbeContext) -> DdpFacts:
    """The DDP wrapper among the loop's root modules; defaults when there is none."""
    model = ctx.model
    if not isinstance(model, DistributedDataParallel):
        return DdpFacts()
    params = [p for p in model.parameters() if p.requires_grad]
    sizes = [p.numel() * p.element_size() for p in params]
    try:  # DDP's own record of the steps so far: a private call, read if it answers
        logged = model._get_ddp_logging_data()
    except Exception:  # noqa: BLE001 - the facts go on without DDP's log
        logged = {}
    unused = logged.get("unused_parameter_size")
    return DdpFacts(
        ddp=True, world_size=dist.get_world_size() if dist.is_initialized() else 1,
        backend=str(dist.get_backend()) if dist.is_initialized() else "",
        find_unused_parameters=bool(model.find_unused_parameters), static_graph=bool(model.static_graph),
        gradient_as_bucket_view=bool(model.gradient_as_bucket_view), comm_hook=bool(getattr(model, "_comm_hooks", ())),
        bucket_cap_bytes=int(model.bucket_bytes_cap),
        bucket_bytes=_sizes(logged.get("rebuilt_bucket_sizes") or logged.get("bucket_sizes")),
        grad_bytes=sum(sizes), largest_param_bytes=max(sizes, default=0),
        unused_param_bytes=int(unused) if unused is not None and model.find_unused_parameters else None,
    )
