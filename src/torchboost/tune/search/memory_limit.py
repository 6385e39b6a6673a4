"""Peak memory in the search: the limit a configuration must fit under, and its words.

Every trial records its peak memory: the CUDA allocator's peak on a GPU, the training
process's peak resident memory (RSS) otherwise; a loader worker's own memory is not
counted. A candidate whose peak is over the limit is rejected as ``over_memory``,
however fast. A memory lever (:attr:`~torchboost.techniques.registry.Lever.for_memory`)
trades time for memory: it is tried only while the configuration kept so far is over the
limit, and kept when it brings the peak under it.
"""

from __future__ import annotations

from typing import Any, Mapping

from torchboost._units import bytes_text

__all__ = ["MEMORY_MARGIN", "PEAK_SLACK", "MemoryGate", "default_memory_limit", "limit_source", "size"]

MEMORY_MARGIN = 0.9
"""The default limit is this share of the device's memory (the GPU's on CUDA, the RAM
otherwise): the rest is headroom for what a short trial does not reach (a longer batch, an
evaluation pass, the allocator's fragmentation, other processes)."""

PEAK_SLACK = 0.05
"""While the configuration kept so far is itself over the limit (no memory lever brought
it under), a candidate may peak at most this share above it: the limit cannot be met
then, and the peaks of one configuration vary a little from run to run."""


def size(n: int | None) -> str:
    """Bytes, compactly: "812 MiB" under a GiB, "12.40 GiB" above; "n/a" when unknown (None or 0)."""
    return bytes_text(n)


def _capacity(env: Mapping[str, Any]) -> tuple[int, str]:
    """The device's memory in bytes, and what it is in words (0 when unknown)."""
    if env.get("device") == "cuda":
        return int(env.get("gpu_memory_bytes") or 0), "the GPU's"
    return int(env.get("ram_bytes") or 0), "the RAM's"


def default_memory_limit(env: Mapping[str, Any]) -> int | None:
    """:data:`MEMORY_MARGIN` of the device's memory, bytes; None when it is unknown.

    ``env``: the observed process's environment (``Environment.to_dict()``, as in the
    doctor's facts): ``gpu_memory_bytes`` on CUDA, ``ram_bytes`` otherwise.
    """
    total, _ = _capacity(env)
    return int(total * MEMORY_MARGIN) if total > 0 else None


def limit_source(limit: int | None, env: Mapping[str, Any]) -> str:
    """How ``limit`` was decided, in words: "90% of the GPU's 80.00 GiB", or given."""
    if limit is None:
        return "none: the device's memory is unknown (pass --memory-limit)"
    total, whose = _capacity(env)
    if limit == default_memory_limit(env):
        return f"{MEMORY_MARGIN:.0%} of {whose} {size(total)}"
    return "given with --memory-limit"


class MemoryGate:
    """The limit, and the peak of the configuration kept so far (bytes; 0: not measured).

    A peak that was not measured is never over anything: a measure that reports no
    memory leaves the search as it was."""

    def __init__(self, limit: int | None, peak: int):
        self.limit = limit
        self.peak = peak
        """The incumbent's peak: the highest of its measured runs."""

    def incumbent_over(self) -> bool:
        """The configuration kept so far peaks over the limit."""
        return self.limit is not None and self.peak > self.limit

    def cap(self, for_memory: bool) -> int | None:
        """The most a candidate may peak at: the limit; while the incumbent is itself over
        it, a memory lever must still get under it, any other change must not raise the
        incumbent's peak beyond :data:`PEAK_SLACK`."""
        if self.limit is None or for_memory or not self.incumbent_over():
            return self.limit
        return int(self.peak * (1 + PEAK_SLACK))

    def over(self, peak: int, for_memory: bool = False) -> str | None:
        """Why ``peak`` is too high, in words; None when it fits (or was not measured)."""
        cap = self.cap(for_memory)
        if cap is None or not peak or peak <= cap:
            return None
        if cap == self.limit:
            return f"peak memory {size(peak)}, over the {size(self.limit)} memory limit"
        return (f"peak memory {size(peak)}, more than {PEAK_SLACK:.0%} over the {size(self.peak)} of the "
                f"configuration kept so far (itself over the {size(self.limit)} limit)")

    def nothing_over(self) -> str:
        """A memory lever's reason for being skipped."""
        if self.limit is None:
            return "nothing is over the memory limit: no limit is known (pass --memory-limit)"
        return (f"nothing is over the memory limit: peak {size(self.peak)}, "
                f"limit {size(self.limit)}")

    def brought_under(self, peak: int, ratio: float, pairs: int) -> str:
        """A kept memory lever's reason: the peak it reached, and its time cost."""
        cost = f"costs {ratio:.2f}x the time per step" if ratio >= 1 else f"{1 / ratio:.2f}x faster too"
        return (f"brings the peak from {size(self.peak)} to {size(peak)}, under the {size(self.limit)} "
                f"memory limit; {cost} (median ratio {ratio:.3f} over {pairs} pair(s))")

    def still_over(self) -> str:
        """The warning when no memory lever brought the peak under the limit."""
        return (f"the baseline's peak memory {size(self.peak)} is over the {size(self.limit)} memory limit "
                f"and no memory lever brought it under: other changes were kept only if they did not raise "
                f"it by more than {PEAK_SLACK:.0%}")
