"""The theoretical fp32 peak from a CPU's flags, clock and cores, on made-up cpuinfo files."""

from __future__ import annotations

import pytest

from torchboost.limits.cpu_peak import CpuInfo, cpu_info, cpu_theoretical_peak

_CPUINFO = """processor\t: 0
model name\t: Example CPU 9000
cpu MHz\t\t: 2245.780
flags\t\t: fpu sse sse2 avx fma avx2 bmi2

processor\t: 1
model name\t: Example CPU 9000
cpu MHz\t\t: 2245.780
flags\t\t: fpu sse sse2 avx fma avx2 bmi2
"""


def test_cpuinfo_is_read_for_the_model_the_vector_flags_and_the_highest_clock(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(_CPUINFO)
    freq = tmp_path / "cpu" / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    (freq / "cpuinfo_max_freq").write_text("3300000\n")  # kHz: the turbo clock is the bound
    info = cpu_info(path, tmp_path / "cpu")
    assert info == CpuInfo("Example CPU 9000", ("sse2", "avx", "avx2", "fma"), 3300.0)
    nominal = cpu_info(path, tmp_path / "none")  # no cpufreq: a virtual machine's nominal clock
    assert nominal.mhz == pytest.approx(2245.78) and nominal.turbo_known is False


def test_a_nominal_clock_is_said_to_be_one_and_a_cpufreq_maximum_is_not():
    nominal = cpu_theoretical_peak(1, CpuInfo("x", ("avx2", "fma"), 2000.0, turbo_known=False))
    known = cpu_theoretical_peak(1, CpuInfo("x", ("avx2", "fma"), 2000.0, turbo_known=True))
    assert "nominal clock" in nominal.formula and "nominal" not in known.formula
    assert nominal.flops_per_s == known.flops_per_s


def test_avx2_with_fma_is_32_flop_per_cycle_per_core():
    peak = cpu_theoretical_peak(1, CpuInfo("x", ("avx", "avx2", "fma"), 2000.0))
    assert peak is not None and peak.flops_per_s == pytest.approx(1 * 2.0e9 * 32)
    assert "32 FLOP/cycle" in peak.formula


def test_twin_without_fma_or_with_avx512_the_peak_differs():
    no_fma = cpu_theoretical_peak(1, CpuInfo("x", ("avx",), 2000.0))
    avx512 = cpu_theoretical_peak(1, CpuInfo("x", ("avx2", "fma", "avx512f"), 2000.0))
    assert no_fma.flops_per_s == pytest.approx(2.0e9 * 16)
    assert avx512.flops_per_s == pytest.approx(2.0e9 * 64)


def test_an_unknown_clock_gives_no_peak():
    assert cpu_theoretical_peak(1, CpuInfo("x", ("avx2", "fma"), None)) is None
