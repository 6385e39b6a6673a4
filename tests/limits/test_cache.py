"""The probe runs once per machine: its figures are kept under a key, in the cache folder."""

from __future__ import annotations

import dataclasses
import json

import pytest

from torchboost.limits import cache
from torchboost.limits.machine import MachineLimits, MatmulRate


@pytest.fixture
def measured(monkeypatch):
    calls: list[int] = []

    def fake(device: str, threads: int, key: str = "") -> MachineLimits:
        calls.append(threads)
        return MachineLimits(key=key, device=device, name="fake", threads=threads,
                             matmul=[MatmulRate("fp32", 64, 1e9 * threads)])

    monkeypatch.setattr(cache, "measure_limits", fake)
    return calls


def test_the_second_call_reads_the_cache_and_refresh_measures_again(tmp_path, measured):
    first, cached = cache.machine_limits("cpu", 2, folder=tmp_path)
    assert (cached, measured) == (False, [2])
    again, cached = cache.machine_limits("cpu", 2, folder=tmp_path)
    assert cached and again == first and measured == [2]
    cache.machine_limits("cpu", 2, folder=tmp_path, refresh=True)
    assert measured == [2, 2]
    other, cached = cache.machine_limits("cpu", 1, folder=tmp_path)  # another thread count: another key
    assert not cached and other.peak_flops_per_s() == 1e9


def test_twin_a_file_for_another_machine_at_the_path_is_not_trusted(tmp_path, measured):
    limits, _ = cache.machine_limits("cpu", 2, folder=tmp_path)
    (path,) = tmp_path.glob("limits-*.json")
    path.write_text(json.dumps({**limits.to_dict(), "key": "cpu|another machine"}))
    _, cached = cache.machine_limits("cpu", 2, folder=tmp_path)
    assert not cached and measured == [2, 2]


def test_the_folder_is_xdg_cache_home_else_home_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "torchboost"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "torchboost"


def _rate(flops: float, share: float) -> MachineLimits:
    return MachineLimits(key="k", device="cpu", name="x", threads=2, matmul=[MatmulRate("fp32", 64, flops, share)],
                         bandwidth_bytes_per_s=flops / 10)


def test_a_busy_probe_is_measured_again_when_allowed_and_the_best_rates_are_kept(tmp_path, monkeypatch):
    measured = iter([_rate(2e10, 0.3), _rate(5e10, 0.9), _rate(3e10, 0.95)])
    monkeypatch.setattr(cache, "measure_limits", lambda device, threads, key="": dataclasses.replace(
        next(measured), key=key))
    first, _ = cache.machine_limits("cpu", 2, folder=tmp_path)
    assert first.busy
    same, cached = cache.machine_limits("cpu", 2, folder=tmp_path)  # the twin: not allowed to measure again
    assert cached and same.peak_flops_per_s() == 2e10
    better, cached = cache.machine_limits("cpu", 2, folder=tmp_path, refresh_busy=True)
    assert not cached and better.peak_flops_per_s() == 5e10 and not better.busy
    kept, cached = cache.machine_limits("cpu", 2, folder=tmp_path, refresh_busy=True)  # quiet now: from the cache
    assert cached and kept.peak_flops_per_s() == 5e10
    again, _ = cache.machine_limits("cpu", 2, folder=tmp_path, refresh=True)  # a lower measurement keeps the best
    assert again.peak_flops_per_s() == 5e10 and again.bandwidth_bytes_per_s == 5e9
