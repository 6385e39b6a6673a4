"""MachineLimits: what the probe measured on one machine, as plain data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BUSY_SHARE", "MachineLimits", "MatmulRate"]

BUSY_SHARE = 0.75
"""Below this share of its threads' CPU time, the probe ran on a busy machine: its peaks are low."""


@dataclass(frozen=True)
class MatmulRate:
    """One measured square matmul: ``size`` x ``size`` by ``size`` x ``size`` in ``dtype``."""

    dtype: str
    """"fp32", "bf16", "fp16" or "tf32"."""
    size: int
    flops_per_s: float
    """2 * size**3 over the best of a few timed runs, FLOP per second."""
    cpu_share: float = 1.0
    """CPU time the process got while that size was timed over the wall time times the
    threads (CPU only): below 1, a neighbour took cores and the rate is lower than the machine's."""


@dataclass(frozen=True)
class MachineLimits:
    """The measured limits of a machine, for the threads (CPU) or the device (GPU) probed."""

    key: str
    """The cache key: what makes two machines the same here (see :func:`~torchboost.limits.machine_key`)."""
    device: str
    """"cpu" or "cuda"."""
    name: str
    """The CPU's model name or the GPU's name."""
    threads: int
    """torch threads the CPU probe ran with (the GPU probe: the host's, unused)."""
    matmul: list[MatmulRate] = field(default_factory=list)
    """Every size and dtype measured."""
    bandwidth_bytes_per_s: float = 0.0
    """Memory bandwidth of a triad ``a = b + s * c`` on arrays far larger than the caches,
    bytes read and written per second (3 arrays per pass, as STREAM counts)."""
    cpu_share: float = 1.0
    """Of the CPU time the probe's threads could have had, the share they got (1.0 on a
    quiet machine; lower when other processes took cores: the peaks are then low)."""
    seconds: float = 0.0
    """How long the probe took."""
    theoretical_flops_per_s: float | None = None
    """The fp32 peak the cores, clock and vector flags allow (CPU), None when unknown."""
    theoretical_formula: str = ""
    """How ``theoretical_flops_per_s`` was computed, with its inputs."""
    flags: list[str] = field(default_factory=list)
    """The CPU's vector flags that matter here (avx, avx2, fma, avx512*, amx*)."""
    torch_version: str = ""

    def peak_flops_per_s(self, dtype: str = "fp32") -> float | None:
        """The best matmul rate measured in ``dtype`` (any size), None when not measured."""
        rates = [m.flops_per_s for m in self.matmul if m.dtype == dtype]
        return max(rates) if rates else None

    @property
    def busy(self) -> bool:
        """A CPU probe whose matmuls got under :data:`BUSY_SHARE` of their threads' CPU time."""
        return self.device == "cpu" and min((m.cpu_share for m in self.matmul), default=1.0) < BUSY_SHARE

    @property
    def busy_note(self) -> str | None:
        """A warning when the probe shared the CPU with other work; None on a quiet machine."""
        if not self.busy:
            return None
        share = min(m.cpu_share for m in self.matmul)
        threads = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        return (f"busy machine: the probe's matmuls got {100 * share:.0f}% of the CPU time of its {threads}, "
                "so its peaks are below the machine's; measured again at the next doctor run, or now with "
                "torchboost probe --refresh (the best of every probe is kept)")

    def best_of(self, other: "MachineLimits") -> "MachineLimits":
        """These limits with each rate (dtype and size) and the bandwidth the better of
        the two probes': a machine's limit is the best it has shown."""
        theirs = {(m.dtype, m.size): m for m in other.matmul}
        best = [max(m, theirs.get((m.dtype, m.size), m), key=lambda r: r.flops_per_s) for m in self.matmul]
        return dataclasses.replace(self, matmul=best,
                                   bandwidth_bytes_per_s=max(self.bandwidth_bytes_per_s, other.bandwidth_bytes_per_s))

    @property
    def dtypes(self) -> list[str]:
        """The dtypes measured, in probe order."""
        return list(dict.fromkeys(m.dtype for m in self.matmul))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (the peaks per dtype included, for readers of the JSON)."""
        data = dataclasses.asdict(self)
        data["peak_flops_per_s"] = {dtype: self.peak_flops_per_s(dtype) for dtype in self.dtypes}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MachineLimits":
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["matmul"] = [MatmulRate(**m) for m in kwargs.get("matmul", [])]
        return cls(**kwargs)
