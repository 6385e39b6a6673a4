"""Numbers every rule needs, derived once from Facts (private to the diagnose package)."""

from __future__ import annotations

from dataclasses import dataclass

from torchboost.evidence.observed import HOST_PHASES, Facts, ProfileFacts
from torchboost.evidence.steps import summarize

REDUCED_DTYPES = ("bfloat16", "float16")

# Ops whose speed bf16 changes on a CPU (oneDNN/AMX kernels); elementwise ops mostly do not.
_MATMUL_OPS = (
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
    "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution",
    "aten::convolution_backward", "aten::_scaled_dot_product",
)


@dataclass(frozen=True)
class View:
    """The step as rules see it: the typical steps' mean times in ms (steps far from the
    median set aside, :func:`~torchboost.evidence.steps.typical_steps`), shares as fractions."""

    device: str
    """"cuda", "mps" or "cpu" (the model's device, else the environment's)."""
    step_ms: float
    """Mean typical step time (the phases' sum); 0.0 when no step was observed."""
    ms: dict[str, float]
    """Mean ms per step of each phase (:data:`~torchboost.evidence.observed.PHASES`)."""
    share: dict[str, float]
    """Fraction (0..1) of the step spent in each phase."""
    cores: int
    """CPU cores the process may use; 0 when unknown."""

    @property
    def host_ms(self) -> float:
        """Mean ms per step outside data, forward, backward and optimizer: checkpoint writes,
        output and the rest (:data:`~torchboost.evidence.observed.HOST_PHASES`)."""
        return sum(self.ms.get(phase, 0.0) for phase in HOST_PHASES)

    @property
    def compute_share(self) -> float:
        """Forward + backward, the part precision and compile speed up."""
        return self.share["forward"] + self.share["backward"]


def view(facts: Facts) -> View:
    """Derive the :class:`View` of ``facts``."""
    summary = summarize(facts)
    device = facts.model.device if facts.model and facts.model.device else facts.env.get("device", "cpu")
    return View(
        device=str(device).split(":")[0],
        step_ms=sum(summary.phase_ms.values()),
        ms=dict(summary.phase_ms),
        share={k: v / 100.0 for k, v in summary.breakdown_pct.items()},
        cores=int(facts.env.get("cpu_cores") or 0),
    )


def amdahl(fraction: float, factor: float) -> float:
    """Whole-step speedup when ``fraction`` of the step gets ``factor`` times faster."""
    return 1.0 / ((1.0 - fraction) + fraction / factor)


def dtype_name(name: str | None) -> str:
    """"torch.bfloat16" -> "bfloat16"; "" for None."""
    return (name or "").removeprefix("torch.")


def per_step_ms(profile: ProfileFacts | None, match, key: str = "self_cpu_ms") -> float | None:
    """Sum of ``key`` over profiled ops whose name satisfies ``match``, per profiled step.

    None when there is no profile, no profiled step, or no matching op (unknown, not zero).
    """
    if profile is None or profile.steps <= 0:
        return None
    hits = [float(op.get(key) or 0.0) for op in profile.top_ops if match(str(op.get("name", "")))]
    return sum(hits) / profile.steps if hits else None


def matmul_share(profile: ProfileFacts | None) -> float | None:
    """Share (0..1) of the profiled ops' self CPU time in matmul/convolution ops; None if unknown."""
    if profile is None or not profile.top_ops:
        return None
    total = sum(float(op.get("self_cpu_ms") or 0.0) for op in profile.top_ops)
    if total <= 0:
        return None
    mm = sum(
        float(op.get("self_cpu_ms") or 0.0)
        for op in profile.top_ops
        if str(op.get("name", "")).startswith(_MATMUL_OPS)
    )
    return mm / total


def cuda_conv_compute_share(facts: Facts, compute_pct: float) -> float | None:
    """Forward+backward's share (0..1) of a conv net's step on CUDA, when it is at least
    ``compute_pct`` percent; None otherwise (the conv rules' common ground)."""
    v, model = view(facts), facts.model
    if v.device != "cuda" or model is None or not model.has_conv2d:
        return None
    f = v.compute_share
    return f if f * 100 >= compute_pct else None


def measured_faster(facts: Facts, finding_id: str) -> bool:
    """The doctor's quick probe of ``finding_id``'s fix measured it faster than plain steps in
    every pair: a rule whose share threshold its noisy estimate missed still fires, since its
    gain was measured, not guessed (another process slowing the compute can shrink a phase's
    share below a threshold while the fix measured x1.4)."""
    for probe in facts.quick_probes:
        if probe.finding_id == finding_id and probe.ratio is not None:
            pairs = probe.pair_ratios
            return min(pairs) > 1.0
    return False


def r(value: float, digits: int = 3) -> float:
    """Round for evidence and reports (keeps JSON readable)."""
    return round(float(value), digits)
