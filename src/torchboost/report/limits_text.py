"""The machine's measured limits in words: ``torchboost probe``'s lines, and the FLOP/s units."""

from __future__ import annotations

from torchboost.env import BUSY_PCT
from torchboost.limits.machine import MachineLimits

__all__ = ["busy_words", "flops_text", "limits_lines", "shared_run_words"]


def flops_text(value: float | None, unit: str = "FLOP/s") -> str:
    """``24.5 GFLOP/s``, ``312 TFLOP/s``, ``n/a`` for None."""
    if value is None:
        return "n/a"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def busy_words(limits: MachineLimits) -> str | None:
    """A warning when the probe shared the CPU with other work; None on a quiet machine."""
    return limits.busy_note


def shared_run_words(load_pct: float) -> str | None:
    """A warning when other processes took more than :data:`~torchboost.env.BUSY_PCT` of the machine while
    the script ran; None otherwise."""
    if load_pct <= BUSY_PCT:
        return None
    return (f"busy machine: other processes used {load_pct:.0f}% of its CPU while the script ran, so its "
            "steps ran slower than they would alone and this report's share of the peak is of a "
            "shared machine; run the doctor again when they are done")


def limits_lines(limits: MachineLimits) -> list[str]:
    """What ``torchboost probe`` prints, one line each."""
    lines = []
    for dtype in limits.dtypes:
        sizes = "   ".join(f"{m.size}: {flops_text(m.flops_per_s)}" for m in limits.matmul if m.dtype == dtype)
        lines.append(f"matmul {dtype:<5} {sizes}   peak {flops_text(limits.peak_flops_per_s(dtype))}")
    lines.append(f"memory bandwidth (triad a = b + s*c)   {flops_text(limits.bandwidth_bytes_per_s, 'B/s')}")
    fp32 = limits.peak_flops_per_s("fp32")
    if limits.theoretical_flops_per_s and fp32:
        share = fp32 / limits.theoretical_flops_per_s
        above = ": the cores ran above that clock (turbo)" if share > 1 else ""
        lines.append(f"theoretical fp32 peak {flops_text(limits.theoretical_flops_per_s)} = "
                     f"{limits.theoretical_formula}; measured {100 * share:.0f}% of it{above}")
    busy = busy_words(limits)
    if busy:
        lines.append(busy)
    return lines
