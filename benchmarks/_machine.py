"""The line each benchmark prints first: the CPU as ``lscpu`` names it, its bf16 and AMX flags,
torch, the intra-op threads and the machine's load, so a table can be traced to its machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path

_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_model() -> str:
    """The CPU's model name as ``lscpu`` gives it (/proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """``CPU: <model name>; flags ...; torch X, N threads; load L`` from /proc/cpuinfo."""
    import torch

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = cpu_model()
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    named = [flag for flag in _FLAGS if flag in flags] or ["no avx2/avx512/amx"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"CPU: {model}; {os.cpu_count()} CPUs; flags {', '.join(named)}; torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads; load {load:.1f}")
