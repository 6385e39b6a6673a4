"""The probe's fp32 peak on this machine against the peak its cores, clock and vector units allow.

    python benchmarks/probe_peak.py [--rounds 3] [--threads N]

The theoretical peak is written out here, apart from the library's own formula:

    peak = cores x clock x FLOP per cycle per core
    FLOP per cycle = 2 FMA pipes x fp32 lanes (16 with avx512f, 8 with avx2 and fma) x 2

The clock is the highest ``/proc/cpuinfo`` or cpufreq reports; without cpufreq (a virtual
machine) ``cpu MHz`` is the nominal clock, and the upper bound allows a turbo clock 1.6x
above it (the highest boost-to-base ratio of the server CPUs seen, EPYC 9654's 1.54, rounded
up). A probe that times no work reads far above the upper bound; one that times a slow
kernel reads under a third of the peak per CPU-second it got. It runs the probe
``--rounds`` times and prints each round's best fp32 rate, its share of the cores, the rate
per CPU-second it got, and the two bounds. This was a unit test's assertion; a timing is a
benchmark's (``tests/limits/test_probe.py`` checks the same bounds under a fake clock).
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import torch

from torchboost.limits.measure import measure_limits

_TURBO_OVER_NOMINAL = 1.6


def theoretical_fp32_peak(threads: int) -> tuple[float, float] | None:
    """(the peak at the reported clock, the upper bound a turbo clock may reach); None when
    the clock, the flags or the two-FMA-pipe formula are unknown here."""
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
    lanes = 16 if "avx512f" in flags else 8 if {"avx2", "fma"} <= flags else None
    if not mhz or lanes is None:
        return None
    peak = min(threads, len(os.sched_getaffinity(0))) * max(mhz) * 1e6 * 2 * lanes * 2
    return peak, peak * turbo


def main(argv: list[str] | None = None) -> int:
    """Print each round's probe against the theoretical bounds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    theory = theoretical_fp32_peak(args.threads)
    if theory is None:
        print("the CPU's clock or flags are unknown here, or it has no avx2+fma: no bound to compare with")
        return 1
    peak, upper = theory
    print(f"threads {args.threads}; theoretical fp32 peak {peak / 1e9:.1f} GFLOP/s, upper bound {upper / 1e9:.1f}, "
          f"a third {peak / 3e9:.1f}")
    print("round  best GFLOP/s  share  per CPU-s GFLOP/s  below upper  above a third  library's theory")
    per_cpu = []
    for round_ in range(args.rounds):
        limits = measure_limits("cpu", threads=args.threads)
        best = max((m for m in limits.matmul if m.dtype == "fp32"), key=lambda m: m.flops_per_s)
        rate = best.flops_per_s / max(best.cpu_share, 1e-3)
        per_cpu.append(rate)
        library = (limits.theoretical_flops_per_s or 0.0) / 1e9
        print(f"{round_:>5}  {best.flops_per_s / 1e9:>12.1f}  {best.cpu_share:>5.2f}  {rate / 1e9:>17.1f}  "
              f"{str(best.flops_per_s < upper):>11}  {str(rate > peak / 3):>13}  {library:>16.1f}")
    print(f"median per CPU-s: {statistics.median(per_cpu) / 1e9:.1f} GFLOP/s "
          f"({statistics.median(per_cpu) / peak:.2f} of the theoretical peak)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
