"""The fp32 peak a CPU's cores, clock and vector flags allow, from ``/proc/cpuinfo``.

    peak = cores x clock x FLOP per cycle per core
    FLOP per cycle = FMA pipes (2) x fp32 lanes (16 with avx512f, 8 with avx/avx2) x 2 (an FMA
                     is a multiply and an add); without fma, avx issues one add and one multiply
                     (8 lanes each: 16 FLOP per cycle), sse 4 lanes each (8)

Two vector pipes is what server cores since Haswell (Intel) and Zen 2 (AMD) have; a core
with one pipe has half this, so the figure is an upper bound. The clock is the highest
reported: ``cpufreq``'s ``cpuinfo_max_freq`` when the kernel exposes it, else ``cpu MHz``.
A virtual machine exposes no cpufreq and reports its nominal clock: the cores may run up to
a turbo clock above it (server CPUs' highest boost is up to about 1.6 times their base), so
there the peak is at the nominal clock and a matmul may measure above it; the formula says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuInfo", "CpuPeak", "cpu_info", "cpu_theoretical_peak", "VECTOR_FLAGS"]

VECTOR_FLAGS = ("sse2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                "amx_fp16", "amx_int8")
"""The flags that set a CPU's matmul rate (kept in the limits and their cache key)."""

_FMA_PIPES = 2


@dataclass(frozen=True)
class CpuInfo:
    """What ``/proc/cpuinfo`` (and cpufreq) say of this CPU; empty fields when unknown."""

    model: str
    flags: tuple[str, ...]
    """The :data:`VECTOR_FLAGS` present."""
    mhz: float | None
    """The highest clock reported, MHz."""
    turbo_known: bool = True
    """Whether ``mhz`` is the highest clock the cores reach (cpufreq's maximum), not a
    nominal clock a turbo may exceed (``cpu MHz`` alone, as on a virtual machine)."""


@dataclass(frozen=True)
class CpuPeak:
    """A theoretical fp32 peak and how it was computed."""

    flops_per_s: float
    formula: str


def _max_freq_mhz(sys_cpu: Path) -> float | None:
    try:
        return int((sys_cpu / "cpu0" / "cpufreq" / "cpuinfo_max_freq").read_text().strip()) / 1000.0
    except (OSError, ValueError):
        return None


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo"), sys_cpu: Path = Path("/sys/devices/system/cpu")) -> CpuInfo:
    """This CPU's model, vector flags and highest clock (empty when the files are absent: macOS, Windows)."""
    model, flags, mhz = "", set(), None
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and not model:
            model = value.strip()
        elif name == "flags" and not flags:
            flags = set(value.split())
        elif name == "cpu MHz" and mhz is None:
            try:
                mhz = float(value)
            except ValueError:
                pass
    max_freq = _max_freq_mhz(sys_cpu)
    highest = max((m for m in (mhz, max_freq) if m), default=None)
    return CpuInfo(model=model, flags=tuple(f for f in VECTOR_FLAGS if f in flags), mhz=highest,
                   turbo_known=max_freq is not None)


def flops_per_cycle(flags: tuple[str, ...]) -> int | None:
    """fp32 FLOP per cycle per core the vector flags allow (see the module docstring); None without sse2."""
    if "avx512f" in flags:
        return _FMA_PIPES * 16 * 2
    if "fma" in flags and ("avx2" in flags or "avx" in flags):
        return _FMA_PIPES * 8 * 2
    if "avx" in flags:
        return 8 * 2
    if "sse2" in flags:
        return 4 * 2
    return None


def cpu_theoretical_peak(threads: int, info: CpuInfo | None = None) -> CpuPeak | None:
    """The fp32 peak of ``threads`` cores (at most the cores this process may use); None
    when the clock or the flags are unknown."""
    info = info if info is not None else cpu_info()
    per_cycle = flops_per_cycle(info.flags)
    if not info.mhz or per_cycle is None:
        return None
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:
        available = os.cpu_count() or 1
    cores = max(1, min(threads, available))
    flops = cores * info.mhz * 1e6 * per_cycle
    clock = "GHz" if info.turbo_known else "GHz (nominal clock; a turbo above it is not reported)"
    return CpuPeak(flops, f"{cores} cores x {info.mhz / 1000:.2f} {clock} x {per_cycle} FLOP/cycle "
                          f"({', '.join(f for f in info.flags if f in ('avx', 'avx2', 'fma', 'avx512f'))})")
