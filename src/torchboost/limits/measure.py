"""The probe: dense matmul throughput per native dtype at a few sizes, and memory bandwidth.

A few seconds on a CPU, less on a GPU. Each matmul size is timed a few times and its best
run kept (the machine's limit, not its average under a neighbour's load); the CPU time the
process got over the wall time says how much of the machine the probe had
(:attr:`MachineLimits.cpu_share`). Inputs come from a generator of their own, never the
user's random stream.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from torchboost import _fp32_precision
from torchboost.limits.cpu_peak import cpu_info, cpu_theoretical_peak
from torchboost.limits.machine import MachineLimits, MatmulRate

__all__ = ["measure_limits", "native_dtypes", "CPU_SIZES", "GPU_SIZES"]

CPU_SIZES = (512, 1024, 2048)
"""Square matmul sizes timed on a CPU."""
GPU_SIZES = (2048, 4096, 8192)
"""Square matmul sizes timed on a GPU."""
_RUN_BUDGET_S = 0.4
"""Time spent on one size and dtype, seconds (at least ``_MIN_RUNS`` runs)."""
_MIN_RUNS = 2
_TRIAD_BYTES = {"cpu": 64 << 20, "cuda": 512 << 20}
"""Bytes of each of the triad's three arrays: far larger than any cache."""
_TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def native_dtypes(device: str, flags: tuple[str, ...] = ()) -> list[str]:
    """The dtypes the device's matmul units run natively: fp32 always; on a CPU bf16 with
    avx512_bf16 or AMX (fp16 with avx512_fp16 or amx_fp16); on a GPU tf32 from Ampere,
    bf16 where supported, fp16."""
    if device == "cuda":
        major, _ = torch.cuda.get_device_capability()
        return ["fp32"] + (["tf32"] if major >= 8 else []) + (
            ["bf16"] if torch.cuda.is_bf16_supported() else []) + ["fp16"]
    out = ["fp32"]
    if {"avx512_bf16", "amx_bf16"} & set(flags):
        out.append("bf16")
    if {"avx512_fp16", "amx_fp16"} & set(flags):
        out.append("fp16")
    return out


def _best_seconds(fn: Callable[[], object], sync: Callable[[], None]) -> tuple[float, float]:
    """(seconds of the fastest run, CPU seconds per wall second the process got over all
    the runs: the other threads' CPU time is accounted at scheduler ticks, so a single
    millisecond run would under-count it)."""
    fn()  # the first call picks and loads kernels
    sync()
    best, runs, start, cpu0 = float("inf"), 0, time.perf_counter(), time.process_time()
    while runs < _MIN_RUNS or time.perf_counter() - start < _RUN_BUDGET_S:
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best, (time.process_time() - cpu0) / (time.perf_counter() - start)


def _matmul_rate(dtype: str, size: int, device: str, sync: Callable[[], None]) -> MatmulRate:
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, generator=g, device=device).to(_TORCH_DTYPES[dtype])
    b = torch.randn(size, size, generator=g, device=device).to(_TORCH_DTYPES[dtype])
    # fp32 means fp32 on the GPU too: cuBLAS's TF32 is allowed for "tf32" alone (the switch
    # touches CUDA's matmuls only, so a CPU's rates are the same), and put back after.
    saved = _fp32_precision.set_tf32(dtype == "tf32", cudnn=False, for_compile=False)  # no compile sees it
    try:
        seconds, cores = _best_seconds(lambda: torch.mm(a, b), sync)
    finally:
        saved.restore()
    share = min(1.0, cores / torch.get_num_threads()) if device == "cpu" else 1.0
    return MatmulRate(dtype, size, 2.0 * size**3 / seconds, share)


def _bandwidth(device: str, sync: Callable[[], None]) -> float:
    n = _TRIAD_BYTES[device] // 4
    b = torch.ones(n, device=device)
    c = torch.ones(n, device=device)
    a = torch.empty(n, device=device)
    seconds, _ = _best_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), sync)
    return 3 * n * 4 / seconds


def _no_sync() -> None:
    return None


def measure_limits(device: str = "cpu", threads: int | None = None, key: str = "") -> MachineLimits:
    """Run the probe on ``device`` ("cpu" or "cuda") with ``threads`` torch threads (the
    current count when None; restored after)."""
    before = torch.get_num_threads()
    threads = threads or before
    info = cpu_info()
    sync = torch.cuda.synchronize if device == "cuda" else _no_sync
    torch.set_num_threads(threads)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        rates = [_matmul_rate(dtype, size, device, sync) for dtype in native_dtypes(device, info.flags)
                 for size in (GPU_SIZES if device == "cuda" else CPU_SIZES)]
        bandwidth = _bandwidth(device, sync)
    finally:
        torch.set_num_threads(before)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    theory = cpu_theoretical_peak(threads, info) if device == "cpu" else None
    return MachineLimits(
        key=key, device=device, name=torch.cuda.get_device_name() if device == "cuda" else info.model,
        threads=threads, matmul=rates, bandwidth_bytes_per_s=bandwidth,
        cpu_share=min(1.0, cpu / (wall * threads)) if device == "cpu" and wall > 0 else 1.0,
        seconds=wall, theoretical_flops_per_s=theory.flops_per_s if theory else None,
        theoretical_formula=theory.formula if theory else "", flags=list(info.flags),
        torch_version=torch.__version__)
