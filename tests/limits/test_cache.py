"""The probe runs once per machine: its figures are kept under a key, in the cache folder."""

from __future__ import annotations

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
