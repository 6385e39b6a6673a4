"""The limits probe's fp32 and TF32 matmuls: cuBLAS's TF32 allowed for "tf32" alone, through
the per-library switch (never the older flags), whatever the process set before, and put
back exactly. Without a GPU the switch is still readable and settable: the timed matmul runs
on the CPU, and the switch it ran under is read at each of its syncs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from torchboost import _fp32_precision
from torchboost.limits.measure import _matmul_rate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _tf32_helpers import (HAS_NEW_API, legacy_writes, read_both_apis, script_used_the_new_api,  # noqa: E402,F401
                           torch_switches)

new_api = pytest.mark.skipif(not HAS_NEW_API, reason="this torch has no per-library fp32_precision switches")


def _rate_under(dtype: str) -> set[bool]:
    """Whether cuBLAS's TF32 was allowed at each sync of the timed matmuls."""
    seen: set[bool] = set()
    _matmul_rate(dtype, 32, "cpu", lambda: seen.add(_fp32_precision.tf32_state().matmul))
    return seen


@new_api
@pytest.mark.parametrize("script", ["default", "new api"])
def test_tf32_is_timed_with_tf32_and_fp32_without_and_both_apis_are_put_back(torch_switches, script):
    if script == "new api":
        script_used_the_new_api()  # torch's older flags raise when read from here on
    before = read_both_apis()
    assert _rate_under("tf32") == {True} and _rate_under("fp32") == {False}
    assert read_both_apis() == before


@new_api
def test_the_probe_writes_no_older_flag(legacy_writes):
    _rate_under("tf32")
    _rate_under("fp32")
    assert legacy_writes == []


@pytest.mark.gpu
def test_gpu_a_tf32_rate_on_the_device_puts_the_switches_back(torch_switches):
    before = read_both_apis()
    rate = _matmul_rate("tf32", 1024, "cuda", torch.cuda.synchronize)
    assert rate.dtype == "tf32" and rate.flops_per_s > 0 and read_both_apis() == before
