"""Host CPU threads: how many intra-op threads torch may use next to the loader's workers.

On a small CPU box the DataLoader's worker processes and torch's intra-op threads run on
the same cores. One run on a 2-core machine with a loader-bound CPU script (about 60% of
each step waiting for data) took, per step: 0 workers/2 threads 84 ms; 2 workers/2 threads
88 ms; 1 worker/2 threads 127 ms; 2 workers/1 thread 62 ms (1.35x faster than the
default); ``benchmarks/loader_threads.py`` runs the grid again (``benchmarks/RESULTS.md``,
"Loader workers x intra-op threads on 2 cores"). Oversubscribing the cores costs more than
the workers bring, so ``auto`` gives the workers their cores and leaves the rest to
intra-op threads (:func:`auto_threads`).

Each worker process already runs with one intra-op thread (DataLoader sets that), so only
the main process's count is ours to choose.
"""

from __future__ import annotations

import os

from dataclasses import dataclass
from typing import ClassVar

import torch

from torchboost.config import AUTO, KEEP, IntOrWord, check_int_or_word

__all__ = ["CpuConfig", "apply_threads", "auto_threads", "resolve_threads"]


MAX_THREADS = max(64, 8 * (os.cpu_count() or 1))
"""The most intra-op threads a file may ask for (8 per core, at least 64, as for loader workers)."""


@dataclass(frozen=True, kw_only=True)
class CpuConfig:
    """Host CPU settings."""

    section: ClassVar[str] = "cpu"

    threads: IntOrWord = AUTO
    """auto (leaves cores for loader workers) | keep | intra-op threads (>= 1)."""

    def __post_init__(self) -> None:
        check_int_or_word("cpu.threads", self.threads, 1, (AUTO, KEEP), maximum=MAX_THREADS)

    @classmethod
    def off(cls) -> "CpuConfig":
        """torch's own thread count."""
        return cls(threads=KEEP)


def auto_threads(
    *,
    cpu_cores: int,
    workers: int,
    device_type: str,
    current_threads: int,
    local_processes: int = 1,
) -> tuple[int | None, str]:
    """The ``auto`` rule: intra-op threads for the main process, or None to keep the current.

    Args:
        cpu_cores: cores this process may run on (affinity-aware).
        workers: DataLoader worker processes this process will run (after resolution).
        device_type: "cpu", "cuda" or "mps": where the model trains.
        current_threads: ``torch.get_num_threads()`` now; torch's default is one per
            physical core, so the rule only ever lowers it (more than that would put two
            threads on one core's hyperthreads).
        local_processes: training processes sharing this machine (torchrun's
            LOCAL_WORLD_SIZE); each gets an equal share of the cores.

    Returns:
        (threads to set or None to keep, reason in words).
    """
    share = max(1, cpu_cores // max(1, local_processes))
    if workers <= 0:
        return None, f"no loader workers compete for the {share} cores; torch's {current_threads} kept"
    wanted = max(1, share - workers)
    if device_type == "cpu":
        why = (
            f"CPU training: {workers} loader workers take {min(workers, share)} of {share} cores, "
            f"intra-op threads get the rest (threads sharing cores with workers slow the step; "
            "benchmarks/loader_threads.py records by how much, not measured here)"
        )
    else:
        why = (
            f"{device_type} training: compute runs on the device; {workers} loader workers take "
            f"{min(workers, share)} of {share} cores, the main process keeps the rest"
        )
    if wanted >= current_threads:
        return None, f"{why}; torch's {current_threads} already fit"
    return wanted, f"{why}: {wanted} (was {current_threads})"


def resolve_threads(
    cpu_cfg: CpuConfig,
    *,
    workers: int,
    cpu_cores: int,
    device: torch.device,
    local_processes: int = 1,
) -> tuple[int | None, str]:
    """Resolve ``cpu.threads`` to an intra-op thread count (None = keep) and its reason.

    ``workers`` is the number of loader workers that will run, ``cpu_cores`` the cores
    this process may use.
    """
    current = torch.get_num_threads()
    if cpu_cfg.threads == "keep":
        return None, f"keep: torch's {current} intra-op threads"
    if isinstance(cpu_cfg.threads, int):
        return cpu_cfg.threads, f"set in config (torch had {current})"
    return auto_threads(
        cpu_cores=cpu_cores,
        workers=workers,
        device_type=device.type,
        current_threads=current,
        local_processes=local_processes,
    )


def apply_threads(threads: int | None) -> None:
    """Set torch's intra-op thread count (``torch.set_num_threads``); None leaves it as is."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"cpu.threads must be >= 1; got {threads}")
    torch.set_num_threads(threads)
