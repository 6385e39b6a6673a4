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
class Collectives:
    """The step's collectives (all-reduce, broadcast...) as the profiler window saw them, ms per step."""

    ms: float
    """Collective time, overlaps counted once."""
    overlap_pct: float
    """Share of it during which the training thread ran an op."""
    exposed_ms: float
    """Collective time with no op of the training thread beside it: what the step waits."""
    in_compute_ms: float
    """Of ``exposed_ms``, what fell in forward and backward (DDP waits for its all-reduce at
    the end of backward)."""
    step_ms: float
    """The step these are part of: the window's own, else the recorded steps' mean."""

    @property
    def share(self) -> float:
        """Share (0..1) of the step the collectives hold."""
        return min(1.0, self.exposed_ms / self.step_ms) if self.step_ms > 0 else 0.0


def collectives(facts: Facts, step_ms: float | None = None) -> Collectives | None:
    """The collectives of ``facts``' profiler window; None where it saw none. Measured within
    the window's steps where it marked them (``ProfileFacts.phases``); else (an older writer)
    the collective time less its overlapped share, over ``step_ms`` (the recorded steps' mean
    by default), held to fall in forward and backward."""
    profile = facts.profile
    if profile is None or not profile.collective_ms_per_step:
        return None
    overlapped = profile.collective_overlap_pct or 0.0
    phases = profile.phases
    if phases.get("step", {}).get("wall_ms"):
        inside = sum(phases.get(p, {}).get("collective_ms", 0.0) for p in ("forward", "backward"))
        return Collectives(profile.collective_ms_per_step, overlapped, phases["step"]["collective_ms"], inside,
                           phases["step"]["wall_ms"])
    summary = summarize(facts)
    exposed = profile.collective_ms_per_step * (1.0 - overlapped / 100.0)
    busy = summary.phase_ms.get("forward", 0.0) + summary.phase_ms.get("backward", 0.0)
    step = sum(summary.phase_ms.values()) if step_ms is None else step_ms
    return Collectives(profile.collective_ms_per_step, overlapped, exposed, min(exposed, busy), step)


PYTHON_PHASE_PCT = 50.0
"""Share of a phase's time outside its ops from which that phase runs the script's Python, percent."""


def python_shares(facts: Facts) -> dict[str, float]:
    """Each phase of the profiler window's (``ProfileFacts.phases``) whose time is
    ``PYTHON_PHASE_PCT`` or more outside its ops, with that share (0..1): its wall less its
    ops and the collectives it waited for, over its wall. {} without the window's phases."""
    phases = facts.profile.phases if facts.profile else {}
    shares = {}
    for phase, times in phases.items():
        if phase == "step" or times.get("wall_ms", 0.0) <= 0:
            continue
        rest = max(0.0, times["wall_ms"] - times.get("op_ms", 0.0) - times.get("collective_ms", 0.0))
        if 100.0 * rest / times["wall_ms"] >= PYTHON_PHASE_PCT:
            shares[phase] = rest / times["wall_ms"]
    return shares


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
    not_compute_share: float = 0.0
    """Fraction (0..1) of the step that forward and backward spend where no compute setting
    reaches: waiting for collectives with no op beside them (:func:`collectives`), and the
    script's own Python in a phase that is mostly Python (:func:`python_shares`)."""

    @property
    def host_ms(self) -> float:
        """Mean ms per step outside data, forward, backward and optimizer: checkpoint writes,
        output and the rest (:data:`~torchboost.evidence.observed.HOST_PHASES`)."""
        return sum(self.ms.get(phase, 0.0) for phase in HOST_PHASES)

    @property
    def compute_share(self) -> float:
        """Forward + backward, the part precision and compile speed up: less what they wait for
        collectives and the Python of a phase that is mostly Python."""
        return max(0.0, self.share["forward"] + self.share["backward"] - self.not_compute_share)


def view(facts: Facts) -> View:
    """Derive the :class:`View` of ``facts``."""
    summary = summarize(facts)
    device = facts.model.device if facts.model and facts.model.device else facts.env.get("device", "cpu")
    step_ms = sum(summary.phase_ms.values())
    found = collectives(facts, step_ms)
    waiting = found.in_compute_ms / found.step_ms if found is not None and found.step_ms > 0 else 0.0
    python = python_shares(facts)
    shares = {k: v / 100.0 for k, v in summary.breakdown_pct.items()}
    waiting += sum(python.get(phase, 0.0) * shares.get(phase, 0.0) for phase in ("forward", "backward"))
    return View(
        device=str(device).split(":")[0],
        step_ms=step_ms,
        ms=dict(summary.phase_ms),
        share=shares,
        cores=int(facts.env.get("cpu_cores") or 0),
        not_compute_share=min(1.0, waiting),
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
    gain was measured in this run, not guessed (another process slowing the compute can shrink
    a phase's share below a threshold while every pair of the probe still finds the fix faster)."""
    for probe in facts.quick_probes:
        if probe.finding_id == finding_id and probe.ratio is not None:
            pairs = probe.pair_ratios
            return min(pairs) > 1.0
    return False


def r(value: float, digits: int = 3) -> float:
    """Round for evidence and reports (keeps JSON readable)."""
    return round(float(value), digits)


def less_often(step_ms: float, part_ms: float, factor: int) -> tuple[float, str]:
    """Step-time ratio when ``part_ms`` of ``step_ms`` runs ``factor`` times less often, and its
    formula (Amdahl's law for the script's own periodic work: a checkpoint, a print, a
    tracker's call, a collection)."""
    saved = part_ms * (1.0 - 1.0 / factor)
    speedup = step_ms / max(step_ms - saved, 1e-9)
    return speedup, (f"T / (T - P x (1 - 1/{factor})) = {step_ms:.2f} / ({step_ms:.2f} - {part_ms:.2f} x "
                     f"{1.0 - 1.0 / factor:.2f}) = {speedup:.3f}")
