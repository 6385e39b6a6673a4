"""The probe's results, kept per machine in the user's cache folder as JSON.

``$XDG_CACHE_HOME/torchboost/`` (else ``~/.cache/torchboost/``), one file per machine key:
the CPU's model, vector flags and the thread count (or the GPU's name), and the torch
version (its kernels set the rates). A machine probed once on a quiet machine is not probed
again unless asked (``torchboost probe --refresh``); a probe that shared the CPU with other
work (:attr:`MachineLimits.busy`) is measured again when the caller allows it
(``refresh_busy``: the doctor does). A new measurement keeps, rate by rate, the best of it
and the cached one: a machine's limit is the best it has shown.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from torchboost import _json as strict_json
from torchboost._io import atomic_write_bytes
from torchboost.limits.cpu_peak import cpu_info
from torchboost.limits.machine import MachineLimits
from torchboost.limits.measure import measure_limits

__all__ = ["cache_dir", "cached_limits", "machine_key", "machine_limits"]


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/torchboost`` when that variable is set, else ``~/.cache/torchboost``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchboost"


def machine_key(device: str, threads: int) -> str:
    """What makes two machines the same for the probe, in words (hashed for the file name)."""
    if device == "cuda":
        return f"cuda|{torch.cuda.get_device_name()}|torch {torch.__version__}"
    info = cpu_info()
    return f"cpu|{info.model}|{' '.join(info.flags)}|{threads} threads|torch {torch.__version__}"


def _path(folder: Path, key: str) -> Path:
    return folder / f"limits-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _cached(path: Path, key: str) -> MachineLimits | None:
    try:
        found = MachineLimits.from_dict(strict_json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent or from an older layout: measure again
    return found if found.key == key else None


def cached_limits(device: str = "cpu", threads: int | None = None, *,
                  folder: Path | None = None) -> MachineLimits | None:
    """This machine's limits as the cache holds them, None when it holds none: never
    measures (a file read), so a probe inside the user's run may ask."""
    key = machine_key(device, threads or torch.get_num_threads())
    return _cached(_path(folder or cache_dir(), key), key)


def machine_limits(device: str = "cpu", threads: int | None = None, *, refresh: bool = False,
                   refresh_busy: bool = False, folder: Path | None = None) -> tuple[MachineLimits, bool]:
    """This machine's limits and whether they came from the cache; measured (a few seconds)
    and saved when absent, unreadable, ``refresh``, or ``refresh_busy`` and the cached probe
    was busy; a new measurement keeps the best of it and the cached one, rate by rate.
    ``threads``: the current count when None."""
    threads = threads or torch.get_num_threads()
    key = machine_key(device, threads)
    path = _path(folder or cache_dir(), key)
    cached = _cached(path, key)
    if cached is not None and not refresh and not (refresh_busy and cached.busy):
        return cached, True
    limits = measure_limits(device, threads, key=key)
    if cached is not None:
        limits = limits.best_of(cached)
    try:
        atomic_write_bytes(path, (strict_json.dumps(limits.to_dict(), indent=1) + "\n").encode("utf-8"))
    except OSError:
        pass  # a read-only home still gets its figures, measured again next time
    return limits, False
