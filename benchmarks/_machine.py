"""The line each benchmark prints first: the CPU as ``lscpu`` names it, its bf16 and AMX flags,
torch, the intra-op threads and the machine's load, so a table can be traced to its machine."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
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


def timed_beside(argv: list[str], *, cwd: Path, loop: str | None = None,
                 settle_s: float = 0.0) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``argv`` in ``cwd`` to its end, timed from outside (what ``time`` shows), with the
    Python source ``loop`` spinning in another process the whole while (None: alone), started
    ``settle_s`` seconds before; (the finished process, its wall seconds)."""
    spinner = (subprocess.Popen([sys.executable, "-c", loop], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               if loop is not None else None)
    try:
        time.sleep(settle_s if spinner is not None else 0.0)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        return done, time.perf_counter() - start
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
