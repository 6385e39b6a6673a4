"""Checkpoint writes and output timed outside the loop's phases, in-process on a ticking clock.

The clock moves 1 ms at every reading, so a counted call (two readings, none in between) is
exactly 1 ms: each row's figure is a count of the calls it holds.
"""

from __future__ import annotations

import copy
import io
import logging
import sys
import threading

import pytest
import torch
from torch import nn

from _fake_cuda import FakeCuda
from torchboost.observe import Instrumentation, ObserveSpec, StepRecorder, StopObserving
from torchboost.observe.hooks.host_calls import TimedStream
from torchboost.observe.record.cuda_phases import CudaPhases
from torchboost.observe.record.phases import CHECKPOINT, OPTIMIZER, OUTPUT


class _Tick:
    """A clock that moves 1 ms at every reading, seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def _recorder(tmp_path, steps=6, warmup=1):
    clock = _Tick()
    spec = ObserveSpec(out_dir=str(tmp_path / "out"), steps=steps, warmup=warmup, profile_active=0, profile_warmup=0)
    return StepRecorder(spec, clock=clock), clock


class _Printing(nn.Module):
    """A model that prints in its own forward (that print is forward's)."""

    def __init__(self, prints: bool) -> None:
        super().__init__()
        self.linear, self.prints = nn.Linear(8, 8), prints

    def forward(self, x):
        if self.prints:
            print("inside forward")
        return self.linear(x)


def _train(rec, clock, tmp_path, *, save_every=2, prints_in_forward=False, after_step=lambda step: None):
    """A loop that prints once a step and saves every ``save_every`` steps (None: never), observed by ``rec``."""
    torch.manual_seed(0)
    model = _Printing(prints_in_forward)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    path = tmp_path / "ckpt.pt"
    with Instrumentation(rec, clock=clock):
        try:
            for step in range(100):
                model(x).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
                print("step", step)
                if save_every and step % save_every == 0:
                    torch.save(model.state_dict(), path)
                after_step(step)
        except StopObserving:
            pass
    return rec.facts(), path


def test_prints_and_saves_between_the_phases_are_their_own_rows(tmp_path):
    rec, clock = _recorder(tmp_path)
    facts, path = _train(rec, clock, tmp_path)
    assert [s.output_ms for s in facts.steps] == pytest.approx([1.0] * 6)  # one print a step
    assert [s.checkpoint_ms for s in facts.steps] == pytest.approx([1.0, 0.0] * 3)  # a save every other step
    for step in facts.steps:  # carved out of "other", never counted twice
        assert step.other_ms == pytest.approx(step.total_ms - step.data_ms - step.forward_ms - step.backward_ms
                                              - step.optimizer_ms - step.checkpoint_ms - step.output_ms)
    host = facts.host
    assert host.checkpoint_every() == 2 and host.output_calls == 6
    assert set(host.checkpoint_bytes) == {path.stat().st_size}


def test_a_print_inside_forward_stays_forward_s(tmp_path):
    rec, clock = _recorder(tmp_path)
    facts, _ = _train(rec, clock, tmp_path, prints_in_forward=True)
    assert [s.output_ms for s in facts.steps] == pytest.approx([1.0] * 6)  # the loop's own print only


def test_twin_a_gate_that_counts_within_phases_counts_forward_s_print_twice(tmp_path, monkeypatch):
    rec, clock = _recorder(tmp_path)
    monkeypatch.setattr(rec.host, "open", lambda: True)  # broken: blind to the phase in flight
    facts, _ = _train(rec, clock, tmp_path, prints_in_forward=True)
    assert [s.output_ms for s in facts.steps] == pytest.approx([2.0] * 6)


def test_a_print_in_the_optimizer_s_step_after_its_closure_stays_the_optimizer_s(tmp_path):
    rec, clock = _recorder(tmp_path, steps=3)

    class Chatty(torch.optim.SGD):
        def step(self, closure=None):
            loss = closure()
            print("optimizer after its closure")  # the optimizer's phase again: not output
            super().step()
            return loss

    model = nn.Linear(8, 8)
    optimizer = Chatty(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)

    def closure():
        optimizer.zero_grad()
        loss = model(x).sum()
        print("inside the closure")  # outside forward and backward: output
        loss.backward()
        return loss

    with Instrumentation(rec, clock=clock):
        with pytest.raises(StopObserving):
            for _ in range(100):
                optimizer.step(closure)
    assert [s.output_ms for s in rec.facts().steps] == pytest.approx([1.0] * 3)
    assert rec.current is None


def test_logging_records_and_stream_writes_count_once_each(tmp_path):
    rec, clock = _recorder(tmp_path)
    logger = logging.getLogger("torchboost-test-host")
    logger.propagate = False

    def log(step):
        sys.stderr.write("a bar's refresh\n")  # what tqdm does
        logger.info("step %d", step)  # one record, however its handler writes it

    with _handler(logger):
        facts, _ = _train(rec, clock, tmp_path, after_step=log)
    assert [s.output_ms for s in facts.steps] == pytest.approx([3.0] * 6)


class _handler:
    """A StreamHandler on sys.stderr for ``logger`` within the block."""

    def __init__(self, logger):
        self.logger = logger

    def __enter__(self):
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(logging.StreamHandler(sys.stderr))
        return self

    def __exit__(self, *exc):
        for handler in list(self.logger.handlers):
            self.logger.removeHandler(handler)


def test_a_save_in_a_thread_of_its_own_and_torchboost_s_bookkeeping_are_not_the_step_s(tmp_path):
    rec, clock = _recorder(tmp_path)

    def elsewhere(step):
        thread = threading.Thread(target=torch.save, args=({"step": step}, io.BytesIO()))
        thread.start()
        thread.join()
        rec.timing.bookkeeping = True  # as between a boundary and the next step
        print("torchboost's own")
        rec.timing.bookkeeping = False

    facts, _ = _train(rec, clock, tmp_path, save_every=None, after_step=elsewhere)
    assert [s.checkpoint_ms for s in facts.steps] == [0.0] * 6
    assert [s.output_ms for s in facts.steps] == pytest.approx([1.0] * 6)  # the loop's print alone


def test_twin_without_the_thread_gate_a_thread_s_save_is_counted(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from torchboost.observe.hooks import host_calls

    monkeypatch.setattr(host_calls, "threading", SimpleNamespace(get_ident=lambda: 1))  # broken: every thread is one
    rec, clock = _recorder(tmp_path)

    def elsewhere(step):
        thread = threading.Thread(target=torch.save, args=({"step": step}, io.BytesIO()))
        thread.start()
        thread.join()

    facts, _ = _train(rec, clock, tmp_path, save_every=None, after_step=elsewhere)
    assert [s.checkpoint_ms for s in facts.steps] == pytest.approx([1.0] * 6)


def test_a_file_object_s_bytes_are_how_far_it_moved(tmp_path):
    rec, clock = _recorder(tmp_path)
    buffer = io.BytesIO(b"x" * 10)
    buffer.seek(10)
    with Instrumentation(rec, clock=clock):
        torch.save({"w": torch.zeros(100)}, buffer)
    assert rec.host.facts().checkpoint_bytes == [buffer.tell() - 10]


def test_safetensors_save_file_is_a_checkpoint_write_too(tmp_path):
    save_file = pytest.importorskip("safetensors.torch").save_file
    rec, clock = _recorder(tmp_path)
    path = tmp_path / "model.safetensors"
    with Instrumentation(rec, clock=clock):
        import safetensors.torch

        safetensors.torch.save_file({"w": torch.zeros(100)}, str(path))
    assert safetensors.torch.save_file is save_file  # put back
    assert rec.host.facts().checkpoint_bytes == [path.stat().st_size] and rec.timing.acc[CHECKPOINT] == pytest.approx(1.0)


def test_uninstall_leaves_the_script_s_own_stdout_and_stand_ins_pass_through(tmp_path):
    rec, clock = _recorder(tmp_path)
    before = sys.stdout
    inst = Instrumentation(rec, clock=clock).install()
    stand_in = sys.stdout
    assert isinstance(stand_in, TimedStream) and stand_in.fileno is not None  # the stream's own methods
    assert copy.copy(stand_in).encoding == before.encoding  # a copy made without __init__ does not recurse
    mine = io.StringIO()
    sys.stdout = mine  # the script replaces it itself
    try:
        inst.uninstall()
        assert sys.stdout is mine and sys.stderr is not None and not isinstance(sys.stderr, TimedStream)
        stand_in.write("after")  # a stand-in still held: straight through, untimed
        assert rec.timing.acc[OUTPUT] == 0.0
    finally:
        sys.stdout = before


def test_on_a_step_timed_on_the_device_a_save_waits_for_it_first_untimed(tmp_path, monkeypatch):
    rec, clock = _recorder(tmp_path)
    cuda = FakeCuda().install(monkeypatch)
    rec.timing.cuda = CudaPhases(OPTIMIZER)  # as next_step leaves it on CUDA
    with Instrumentation(rec, clock=clock):
        print("plain text")  # a print that would not wait: no sync of ours
        assert cuda.syncs == []
        print(_cuda_like(torch.zeros(2)))  # formatting a CUDA tensor waits: drained first
        assert len(cuda.syncs) == 1
        torch.save({"w": torch.zeros(4)}, io.BytesIO())
        assert len(cuda.syncs) == 2
    assert rec.timing.acc[CHECKPOINT] == pytest.approx(1.0) and rec.timing.acc[OUTPUT] == pytest.approx(2.0)


def test_twin_off_the_device_nothing_is_drained(tmp_path, monkeypatch):
    rec, clock = _recorder(tmp_path)
    cuda = FakeCuda().install(monkeypatch)
    with Instrumentation(rec, clock=clock):  # rec.timing.cuda is None: a CPU step
        print(_cuda_like(torch.zeros(2)))
        torch.save({"w": torch.zeros(4)}, io.BytesIO())
    assert cuda.syncs == []


class _CudaLike(torch.Tensor):
    """A CPU tensor that says it is on CUDA (this machine has none)."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def _cuda_like(tensor: torch.Tensor) -> torch.Tensor:
    return torch.Tensor._make_subclass(_CudaLike, tensor)
