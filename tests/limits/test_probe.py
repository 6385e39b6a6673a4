"""The probe's fp32 peak against the peak this CPU's cores, clock and vector units allow.

The theoretical peak is written out here, apart from the library's own formula:

    peak = cores x clock x FLOP per cycle per core
    FLOP per cycle = 2 FMA pipes x fp32 lanes (16 with avx512f, 8 with avx2 and fma) x 2

(an FMA is two FLOPs; two pipes is what server cores have had since Haswell and Zen 2).
The clock is the highest ``/proc/cpuinfo`` or cpufreq reports; unknown, the test skips.
Without cpufreq (a virtual machine) ``cpu MHz`` is the nominal clock and the cores may run
at a turbo clock above it: the upper bound then allows the highest boost-to-base ratio of
the server CPUs seen (EPYC 7B12 3.3/2.25 GHz = 1.47, EPYC 9654 3.7/2.4 = 1.54, Xeon 8375C
3.5/2.9 = 1.21), rounded up to 1.6. A probe that times no work measures far above either.

On a shared machine the probe's threads get only part of the cores, so the lower bound
is checked on the rate the probe's cores gave per CPU-second they actually got (its rate
divided by its ``cpu_share``): what it would do with the cores to itself.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from torchboost.limits import measure as probe_module
from torchboost.limits.machine import MachineLimits
from torchboost.limits.measure import measure_limits


_TURBO_OVER_NOMINAL = 1.6


def _theoretical_fp32_peak(threads: int) -> tuple[float, float]:
    """(the peak at the reported clock, the upper bound a turbo clock may reach)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags: set[str] = set()
    mhz = []
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            flags = set(value.split())
        elif name.strip() == "cpu MHz":
            mhz.append(float(value))
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    turbo = 1.0 if max_freq.exists() else _TURBO_OVER_NOMINAL
    if max_freq.exists():
        mhz.append(int(max_freq.read_text()) / 1000.0)
    if not mhz or not flags:
        pytest.skip("the CPU's clock or flags are unknown here (no /proc/cpuinfo)")
    if "avx512f" in flags:
        lanes = 16
    elif {"avx2", "fma"} <= flags:
        lanes = 8
    else:
        pytest.skip(f"no avx2+fma or avx512f: the two-FMA-pipe formula does not hold ({sorted(flags)[:5]}...)")
    cores = min(threads, len(os.sched_getaffinity(0)))
    peak = cores * max(mhz) * 1e6 * 2 * lanes * 2
    return peak, peak * turbo


def _peak_within_theory(limits: MachineLimits, theoretical: tuple[float, float]) -> tuple[bool, bool]:
    """(below the upper bound, above a third of the reported clock's peak per CPU-second the probe got)."""
    peak, upper = theoretical
    best = max((m for m in limits.matmul if m.dtype == "fp32"), key=lambda m: m.flops_per_s)
    return best.flops_per_s < upper, best.flops_per_s / max(best.cpu_share, 1e-3) > peak / 3


@pytest.fixture(scope="module")
def theoretical() -> tuple[float, float]:
    return _theoretical_fp32_peak(torch.get_num_threads())


def test_the_fp32_peak_is_below_the_theoretical_peak_and_above_a_third_of_it(theoretical):
    limits = measure_limits("cpu")
    assert limits.peak_flops_per_s("fp32") is not None
    assert _peak_within_theory(limits, theoretical) == (True, True)
    assert limits.bandwidth_bytes_per_s > 1e8  # a triad moves at least 100 MB/s on any machine
    # the library's own formula agrees with the one written out above
    assert limits.theoretical_flops_per_s == pytest.approx(theoretical[0])


def test_twin_a_probe_whose_timed_matmul_does_no_work_is_above_the_theoretical_peak(theoretical, monkeypatch):
    monkeypatch.setattr(probe_module, "CPU_SIZES", (1024,))
    monkeypatch.setattr(probe_module, "_bandwidth", lambda device, sync: 1.0)
    monkeypatch.setattr(probe_module.torch, "mm", lambda a, b: a)  # times nothing
    limits = measure_limits("cpu")
    assert _peak_within_theory(limits, theoretical)[0] is False


def test_twin_a_probe_timing_an_unblocked_matmul_is_below_a_third(theoretical, monkeypatch):
    monkeypatch.setattr(probe_module, "CPU_SIZES", (192,))
    monkeypatch.setattr(probe_module, "_bandwidth", lambda device, sync: 1.0)
    monkeypatch.setattr(probe_module.torch, "mm", lambda a, b: (a.unsqueeze(2) * b.unsqueeze(0)).sum(1))
    limits = measure_limits("cpu")
    assert _peak_within_theory(limits, theoretical)[1] is False


def test_bf16_is_probed_only_where_the_cpu_runs_it_natively():
    assert probe_module.native_dtypes("cpu", ("avx2", "fma")) == ["fp32"]
    assert probe_module.native_dtypes("cpu", ("avx512f", "avx512_bf16")) == ["fp32", "bf16"]
    assert probe_module.native_dtypes("cpu", ("amx_bf16", "amx_fp16")) == ["fp32", "bf16", "fp16"]
