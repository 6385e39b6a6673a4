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


def _meter_over(monkeypatch, span_s: float):
    """A load meter stopped ``span_s`` seconds (a fake clock's) after it started, the machine's
    counters saying the others used half of it."""
    from torchboost import env as env_module
    clock = iter([100.0, 100.0 + span_s])
    busy = iter([10.0, 10.0 + 0.5 * span_s * (env_module.psutil.cpu_count() or 1)])
    monkeypatch.setattr(env_module.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(env_module, "_busy_s", lambda: next(busy))
    meter = env_module.LoadMeter(own=lambda: 0.0)
    meter.start()
    meter.stop()
    return meter


def test_a_load_over_a_span_shorter_than_the_counters_tick_is_no_figure(monkeypatch):
    # A check's run over in a few milliseconds: the counters cannot tell 0% from 100% there.
    assert not _meter_over(monkeypatch, 0.01).measured


def test_twin_a_load_over_a_run_of_seconds_is_its_figure(monkeypatch):
    meter = _meter_over(monkeypatch, 3.0)
    assert meter.measured and meter.pct == pytest.approx(50.0)


class _FakeClock:
    """``time`` for env.py alone: its clock moves only by what the fake matmuls take."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.mark.parametrize("slowed, ratio", [(4, 2.0), (16, 1.0 / 50.5)])
def test_the_bf16_speed_probe_is_not_lowered_by_a_burst_over_some_of_its_runs(monkeypatch, slowed, ratio):
    """Under a fake clock, fp32's matmul takes 1 ms and bf16's 0.5 ms (bf16 twice as fast).
    Another process's burst adds 50 ms to 3 of the timed bf16 runs (after the warm-up): each
    side's fastest run, interleaved, reads 2.0 as without it. Twin: every bf16 run slowed
    (a CPU whose bf16 really is slow) reads 1 / 50.5."""
    import torch

    import torchboost.env as env

    clock, seen = _FakeClock(), {"bf16": 0}

    def mm(x, y):
        if x.dtype == torch.bfloat16:
            seen["bf16"] += 1
            clock.now += 0.0005 + (0.05 if seen["bf16"] <= slowed else 0.0)  # the warm-up call is the first
        else:
            clock.now += 0.001
        return x

    monkeypatch.setattr(env, "time", clock)
    monkeypatch.setattr(torch, "mm", mm)
    measure = env.measure_cpu_bf16_speedup.__wrapped__  # measured once per process: not here
    assert measure(repeats=15) == pytest.approx(ratio)
