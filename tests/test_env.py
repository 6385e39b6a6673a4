"""torchrun's variables, read in env.py alone: this process's now, and the probed snapshot's."""

from __future__ import annotations

import dataclasses

import pytest

from torchboost import env
from torchboost.env import DIST_ENV_VARS, probe


@pytest.fixture
def no_torchrun(monkeypatch):
    for name in DIST_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_outside_torchrun_this_is_rank_0_of_1(no_torchrun):
    assert (env.rank(), env.world_size(), env.is_torchrun_rank(), env.torchrun_env()) == (0, 1, False, {})


def test_under_torchrun_the_variables_are_read(no_torchrun):
    no_torchrun.setenv("RANK", "3")
    no_torchrun.setenv("LOCAL_RANK", "1")
    no_torchrun.setenv("WORLD_SIZE", "4")
    assert (env.rank(), env.world_size(), env.is_torchrun_rank()) == (3, 4, True)
    assert env.torchrun_env() == {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}


def test_an_empty_variable_counts_as_unset(no_torchrun):
    no_torchrun.setenv("RANK", "")
    no_torchrun.setenv("WORLD_SIZE", "")
    assert (env.rank(), env.world_size()) == (0, 1)


def test_the_snapshot_says_rank_and_sizes():
    job = dataclasses.replace(probe(), dist_env={"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
                                                  "LOCAL_WORLD_SIZE": "4"})
    assert (job.rank, job.local_rank, job.world_size, job.local_world_size, job.distributed) == (5, 1, 8, 4, True)
    alone = dataclasses.replace(probe(), dist_env={})
    assert (alone.rank, alone.local_rank, alone.world_size, alone.local_world_size, alone.distributed) == (
        0, 0, 1, 1, False)


def test_a_load_meter_s_share_is_never_over_the_whole_machine(monkeypatch):
    # Coarse machine counters over a short span can read more busy time than the span holds.
    from torchboost import env as env_module
    readings = iter([10.0, 10.0 + 50.0 * (env_module.psutil.cpu_count() or 1)])
    monkeypatch.setattr(env_module, "_busy_s", lambda: next(readings))
    meter = env_module.LoadMeter(own=lambda: 0.0)
    meter.start()
    assert meter.stop() == 100.0


@pytest.mark.parametrize("slowed, hurt", [(4, False), (16, True)])
def test_the_bf16_speed_probe_is_not_lowered_by_a_burst_over_some_of_its_runs(monkeypatch, slowed, hurt):
    """Another process's burst slows 3 of the timed bf16 matmuls (after the warm-up): each
    side's fastest run, interleaved, reads as without it. Twin: every bf16 run slowed (a
    CPU whose bf16 really is slow) lowers the ratio."""
    import time as _time

    import torch

    import torchboost.env as env

    real_mm, seen = torch.mm, {"bf16": 0}

    def mm(x, y):
        out = real_mm(x, y)
        if x.dtype == torch.bfloat16:
            seen["bf16"] += 1
            if seen["bf16"] <= slowed:  # the warm-up call is the first
                _time.sleep(0.05)
        return out

    measure = env.measure_cpu_bf16_speedup.__wrapped__  # measured once per process: not here
    quiet = measure(repeats=15)  # more runs than the default 7: the test suite's own load beside it
    monkeypatch.setattr(torch, "mm", mm)
    busy = measure(repeats=15)
    assert (busy < quiet / 2) is hurt, (quiet, busy)
