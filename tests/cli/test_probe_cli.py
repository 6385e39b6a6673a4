"""``torchboost probe``: prints the measured limits, keeps them in the cache, refuses bad usage."""

from __future__ import annotations

import json

from torchboost.cli import main
from torchboost.limits import cache
from torchboost.limits.machine import MachineLimits, MatmulRate


def _fake(device: str, threads: int, key: str = "") -> MachineLimits:
    return MachineLimits(key=key, device=device, name="Example CPU", threads=threads, seconds=0.1,
                         matmul=[MatmulRate("fp32", 512, 2.0e10, 0.5), MatmulRate("fp32", 1024, 3.0e10, 0.5)],
                         bandwidth_bytes_per_s=8e9, theoretical_flops_per_s=6.0e10,
                         theoretical_formula="1 cores x 1.88 GHz x 32 FLOP/cycle (avx2, fma)")


def test_probe_prints_the_peaks_then_reads_them_from_the_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cache, "measure_limits", _fake)
    assert main(["probe", "--device", "cpu", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "measured in 0.1 s" in out and "peak 30 GFLOP/s" in out and "8 GB/s" in out
    assert "measured 50% of it" in out  # 30 of 60 GFLOP/s
    assert "busy machine: the probe's matmuls got 50% of the CPU time of its 1 thread," in out
    assert len(list((tmp_path / "torchboost").glob("limits-*.json"))) == 1
    assert main(["probe", "--device", "cpu", "--threads", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cached"] is True and data["peak_flops_per_s"] == {"fp32": 3.0e10}


def test_twin_bad_usage_exits_2_without_measuring(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cache, "measure_limits", _fake)
    assert main(["probe", "--threads", "0"]) == 2
    assert main(["probe", "--", "python", "train.py"]) == 2
    assert "--threads must be 1 or more" in capsys.readouterr().err
    assert not (tmp_path / "torchboost").exists()


def test_a_peak_above_the_nominal_clocks_is_said_to_be_a_turbo_and_one_below_is_not():
    import dataclasses

    from torchboost.report.limits_text import limits_lines

    below = " ".join(limits_lines(_fake("cpu", 1)))
    above_limits = dataclasses.replace(_fake("cpu", 1), theoretical_flops_per_s=2.5e10)  # 30 is 120% of 25
    above = " ".join(limits_lines(above_limits))
    assert "measured 120% of it: the cores ran above that clock (turbo)" in above
    assert "turbo" not in below
