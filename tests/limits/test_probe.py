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

The probe runs here under a fake clock (a timing is no unit test's assertion): the bounds
are checked on the rates it reads. The probe on this machine against these bounds is
``benchmarks/probe_peak.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from torchboost.limits import measure as probe_module
from torchboost.limits.machine import MachineLimits
from torchboost.limits.measure import measure_limits


def _written_out_formula():
    """``theoretical_fp32_peak`` of ``benchmarks/probe_peak.py``: the formula above, written
    apart from the library's, where the benchmark holds the probe on this machine to it."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "probe_peak.py"
    spec = importlib.util.spec_from_file_location("_bench_probe_peak", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.theoretical_fp32_peak


def _peak_within_theory(limits: MachineLimits, theoretical: tuple[float, float]) -> tuple[bool, bool]:
    """(below the upper bound, above a third of the reported clock's peak per CPU-second the probe got)."""
    peak, upper = theoretical
    best = max((m for m in limits.matmul if m.dtype == "fp32"), key=lambda m: m.flops_per_s)
    return best.flops_per_s < upper, best.flops_per_s / max(best.cpu_share, 1e-3) > peak / 3


@pytest.fixture(scope="module")
def theoretical() -> tuple[float, float]:
    found = _written_out_formula()(torch.get_num_threads())
    if found is None:
        pytest.skip("the CPU's clock or flags are unknown here, or it has no avx2+fma: the formula does not hold")
    return found


class _FakeTime:
    """``time`` for the probe alone: a matmul of size n takes 2 n^3 / ``flops_per_s`` wall
    seconds, during which the process gets ``cores`` CPU seconds a second."""

    def __init__(self, flops_per_s: float, cores: float) -> None:
        self.flops_per_s, self.cores = flops_per_s, cores
        self.wall = self.cpu = 0.0

    def perf_counter(self) -> float:
        return self.wall

    def process_time(self) -> float:
        return self.cpu

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        seconds = 2.0 * a.shape[0] ** 3 / self.flops_per_s
        self.wall += seconds
        self.cpu += seconds * self.cores
        return a


def _probed(monkeypatch, flops_per_s: float, cores: float, threads: int = 2) -> MachineLimits:
    """The probe run under a fake clock whose matmuls go at ``flops_per_s``."""
    fake = _FakeTime(flops_per_s, cores)
    monkeypatch.setattr(probe_module, "time", fake)
    monkeypatch.setattr(probe_module, "CPU_SIZES", (64, 128))
    monkeypatch.setattr(probe_module, "_RUN_BUDGET_S", 0.0)  # its least runs: a fake time has no noise
    monkeypatch.setattr(probe_module, "_bandwidth", lambda device, sync: 1e10)
    monkeypatch.setattr(probe_module, "native_dtypes", lambda device, flags=(): ["fp32"])
    monkeypatch.setattr(probe_module.torch, "mm", fake.mm)
    return measure_limits("cpu", threads=threads)


THEORY = (1e11, 1.6e11)
"""A hand-made (peak at the reported clock, turbo's upper bound), FLOP/s."""


def test_the_probe_reads_the_matmuls_rate_and_the_share_of_the_cores_it_got(monkeypatch):
    limits = _probed(monkeypatch, flops_per_s=6e10, cores=1.0, threads=2)  # a neighbour took one of two cores
    assert limits.peak_flops_per_s("fp32") == pytest.approx(6e10)
    assert {m.size for m in limits.matmul} == {64, 128}
    assert all(m.cpu_share == pytest.approx(0.5) for m in limits.matmul)
    assert _peak_within_theory(limits, THEORY) == (True, True)  # 6e10 / 0.5 is above a third of 1e11


def test_twin_a_probe_whose_timed_matmul_does_no_work_is_above_the_theoretical_peak(monkeypatch):
    limits = _probed(monkeypatch, flops_per_s=1e15, cores=2.0)  # a matmul timed at next to nothing
    assert _peak_within_theory(limits, THEORY)[0] is False


def test_twin_a_probe_timing_an_unblocked_matmul_is_below_a_third(monkeypatch):
    limits = _probed(monkeypatch, flops_per_s=1e10, cores=2.0)  # all the cores, a tenth of the peak
    assert _peak_within_theory(limits, THEORY)[1] is False


def test_the_librarys_formula_agrees_with_the_one_written_out_above(theoretical, monkeypatch):
    limits = _probed(monkeypatch, flops_per_s=6e10, cores=2.0, threads=torch.get_num_threads())
    assert limits.theoretical_flops_per_s == pytest.approx(theoretical[0])


def test_bf16_is_probed_only_where_the_cpu_runs_it_natively():
    assert probe_module.native_dtypes("cpu", ("avx2", "fma")) == ["fp32"]
    assert probe_module.native_dtypes("cpu", ("avx512f", "avx512_bf16")) == ["fp32", "bf16"]
    assert probe_module.native_dtypes("cpu", ("amx_bf16", "amx_fp16")) == ["fp32", "bf16", "fp16"]
