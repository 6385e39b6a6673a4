"""The CUDA phase timer on fake events: device times replace host times for the phases it saw.

Each event reads a device clock the test moves by hand (``tests/observe/_fake_cuda.py``), so
every figure below is exact.
"""

from __future__ import annotations

import pytest

from torchboost.observe.record.cuda_phases import CudaPhases
from torchboost.observe.record.phases import BACKWARD, DATA, FORWARD, OPTIMIZER

from _fake_cuda import FakeCuda

HOST = [1.0, 2.0, 3.0, 4.0]
"""Host milliseconds per phase (data, forward, backward, optimizer) the hooks had added."""


@pytest.fixture
def cuda(monkeypatch) -> FakeCuda:
    return FakeCuda().install(monkeypatch)


def _span(phases: CudaPhases, cuda: FakeCuda, phase: int, ms: float) -> None:
    phases.begin(phase)
    cuda.now_ms += ms
    phases.end(phase)


def test_a_phase_begun_and_ended_gets_its_device_time(cuda):
    phases = CudaPhases(OPTIMIZER)
    _span(phases, cuda, FORWARD, 5.0)
    cuda.now_ms += 100.0  # between phases: the script's own time, no phase's
    _span(phases, cuda, BACKWARD, 7.0)
    _span(phases, cuda, FORWARD, 0.5)  # a second forward (a loss module) adds to the first
    acc = list(HOST)
    phases.collect(acc)
    assert acc == [1.0, 5.5, 7.0, 4.0]


def test_only_the_phases_seen_are_replaced(cuda):
    # The data wait is never timed on the device and the optimizer did not run: their host
    # times stay, where a replacement of every phase would zero them.
    phases = CudaPhases(OPTIMIZER)
    _span(phases, cuda, FORWARD, 5.0)
    acc = list(HOST)
    phases.collect(acc)
    assert acc[DATA] == 1.0 and acc[BACKWARD] == 3.0 and acc[OPTIMIZER] == 4.0 and acc[FORWARD] == 5.0


def test_an_unterminated_phase_keeps_its_host_time(cuda):
    # A forward that raised (the post hook did not run), or one still open at the boundary:
    # it has no end event, so no device time, and its host time is what is known.
    phases = CudaPhases(OPTIMIZER)
    phases.begin(BACKWARD)
    cuda.now_ms += 9.0
    _span(phases, cuda, FORWARD, 2.0)
    acc = list(HOST)
    phases.collect(acc)
    assert acc == [1.0, 2.0, 3.0, 4.0]


def test_an_end_without_its_begin_records_nothing(cuda):
    phases = CudaPhases(OPTIMIZER)
    phases.end(FORWARD)
    acc = list(HOST)
    phases.collect(acc)
    assert acc == HOST and cuda.events == 0


def test_the_closure_is_carved_out_of_the_optimizer_phase(cuda):
    # optimizer.step(closure): the closure's forward and backward run inside the step; they are
    # the forward's and backward's time, not the optimizer's.
    phases = CudaPhases(OPTIMIZER)
    phases.begin(OPTIMIZER)
    cuda.now_ms += 1.0
    phases.carve_begin()
    _span(phases, cuda, FORWARD, 4.0)
    _span(phases, cuda, BACKWARD, 6.0)
    phases.carve_end()
    cuda.now_ms += 2.0
    phases.end(OPTIMIZER)
    acc = list(HOST)
    phases.collect(acc)
    assert acc == [1.0, 4.0, 6.0, 3.0]  # 13 ms of optimizer step, 10 of them the closure's


def test_twin_without_the_carve_out_the_closure_would_be_the_optimizer_s(cuda):
    # The broken twin: a timer carving from another phase leaves the closure in the optimizer.
    phases = CudaPhases(DATA)
    phases.begin(OPTIMIZER)
    cuda.now_ms += 1.0
    phases.carve_begin()
    _span(phases, cuda, FORWARD, 4.0)
    phases.carve_end()
    phases.end(OPTIMIZER)
    acc = list(HOST)
    phases.collect(acc)
    assert acc[OPTIMIZER] == 5.0


def test_a_closure_run_twice_is_carved_twice_and_never_below_zero(cuda):
    phases = CudaPhases(OPTIMIZER)
    phases.begin(OPTIMIZER)
    for _ in range(2):  # LBFGS re-runs its closure
        phases.carve_begin()
        cuda.now_ms += 3.0
        phases.carve_end()
    cuda.now_ms += 1.0
    phases.end(OPTIMIZER)
    phases.carve_begin()  # a span after the phase ended still counts against it...
    cuda.now_ms += 50.0
    phases.carve_end()
    acc = list(HOST)
    phases.collect(acc)
    assert acc[OPTIMIZER] == 0.0  # ...but the phase is never negative
    phases.carve_end()  # an end without its begin: nothing
    acc = list(HOST)
    phases.collect(acc)
    assert acc == HOST


def test_the_carve_out_applies_only_when_the_optimizer_phase_was_seen(cuda):
    phases = CudaPhases(OPTIMIZER)
    phases.carve_begin()
    _span(phases, cuda, FORWARD, 4.0)
    phases.carve_end()
    acc = list(HOST)
    phases.collect(acc)
    assert acc == [1.0, 4.0, 3.0, 4.0]


def test_collect_clears_its_state_for_the_next_step(cuda):
    phases = CudaPhases(OPTIMIZER)
    _span(phases, cuda, FORWARD, 5.0)
    phases.begin(BACKWARD)  # left open at the boundary
    phases.carve_begin()  # likewise
    phases.collect(list(HOST))
    cuda.now_ms += 10.0
    phases.end(BACKWARD)  # its begin was the last step's: not this step's device time
    phases.carve_end()
    acc = list(HOST)
    phases.collect(acc)
    assert acc == HOST
    _span(phases, cuda, OPTIMIZER, 2.0)
    acc = list(HOST)
    phases.collect(acc)
    assert acc == [1.0, 2.0, 3.0, 2.0]  # nothing of the last step carved from this one
