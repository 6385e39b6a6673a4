"""An evaluation pass inside the training loop is no part of a training step: its time is
its own, and its loader is not the training loader."""

from __future__ import annotations

import pytest
import torch

from torchboost.evidence.steps import summarize
from torchboost.observe import ObserveSpec, StepRecorder, StopObserving
from torchboost.observe.record.recorder import DATA, FORWARD
from torchboost.report.doctor_report import run_notes

from _fake_cuda import FakeCuda


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Loop:
    """A recorder fed a loop by hand: a training loader of 10 batches, an evaluation loader
    of 30, a model; each call advances the fake clock."""

    def __init__(self, tmp_path, *, eval_grad: bool) -> None:
        self.clock = _Clock()
        spec = ObserveSpec(out_dir=str(tmp_path), steps=6, warmup=1, profile_active=0)
        self.rec = StepRecorder(spec, clock=self.clock)
        self.model = torch.nn.Linear(2, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.eval_grad = eval_grad
        self.train_iter, self.eval_iter = object(), object()
        self.eval_loader = torch.utils.data.DataLoader(list(range(30)))
        self.rec.loader_iter(torch.utils.data.DataLoader(list(range(10))), self.train_iter)
        self.rec.loader_iter(self.eval_loader, self.eval_iter)

    def _batch(self, iterator, ms: float) -> None:
        self.rec.data_begin()
        self.clock.now += ms / 1000
        self.rec.loader_batch(iterator, ms)

    def _forward(self, ms: float) -> None:
        self.rec.forward_begin(self.model, ())
        self.clock.now += ms / 1000
        self.rec.phase_end(FORWARD, ms)

    def train_step(self) -> None:
        self._batch(self.train_iter, 1.0)
        self._forward(2.0)
        self.rec.backward_tensor(torch.tensor(1.0))
        self.clock.now += 0.003
        self.rec.backward_done()
        self.rec.optimizer_begin(self.optimizer)
        self.clock.now += 0.001
        self.rec.optimizer_done(self.optimizer)

    def evaluate(self) -> None:
        self.eval_iter = object()
        self.rec.loader_iter(self.eval_loader, self.eval_iter)  # the evaluation starts here:
        self.clock.now += 0.005  # model.eval(), the loader's iter(): 5 ms
        with torch.set_grad_enabled(self.eval_grad):
            for _ in range(30):
                self._batch(self.eval_iter, 1.0)
                self._forward(2.0)
                self.clock.now += 0.001  # the loss and the metric, in the script's body

    def run(self) -> None:
        try:
            for step in range(20):
                self.train_step()
                if step % 3 == 2:
                    self.evaluate()
        except StopObserving:
            pass


@pytest.mark.parametrize("eval_grad", [False, True])
def test_evaluation_is_outside_the_step_and_its_loader_is_not_the_training_loader(tmp_path, eval_grad):
    loop = _Loop(tmp_path, eval_grad=eval_grad)
    loop.run()
    facts = loop.rec.facts()
    # The training loader is the one whose batches reached backward, in either case.
    assert facts.loader.num_batches == 10
    summary = summarize(facts)
    if eval_grad:  # twin: evaluation with gradients on cannot be told from training
        assert summary.evaluation_passes == 0
        assert max(s.forward_ms for s in facts.steps) == pytest.approx(62.0)
        assert max(s.total_ms for s in facts.steps) == pytest.approx(7.0 + 125.0)
        assert not any("Evaluation" in n for n in run_notes(facts, summary, []))
        return
    assert [s.total_ms for s in facts.steps] == pytest.approx([7.0] * 6)
    assert [s.forward_ms for s in facts.steps] == pytest.approx([2.0] * 6)
    assert [s.data_ms for s in facts.steps] == pytest.approx([1.0] * 6)
    assert summary.evaluation_passes == 2 and summary.evaluation_ms == pytest.approx(2 * 125.0)
    note = next(n for n in run_notes(facts, summary, []) if n.startswith("Evaluation"))
    assert "2 passes over the 6 measured steps" in note and "left out of the step time" in note


def test_a_module_only_ever_called_with_gradients_off_is_part_of_the_step(tmp_path):
    # A teacher (or a frozen encoder) under no_grad inside the step is training's work.
    loop = _Loop(tmp_path, eval_grad=False)
    teacher = torch.nn.Linear(2, 1)
    try:
        for _ in range(10):
            with torch.no_grad():
                loop.rec.forward_begin(teacher, ())
                loop.clock.now += 0.005
                loop.rec.phase_end(FORWARD, 5.0)
            loop.train_step()
    except StopObserving:
        pass
    facts = loop.rec.facts()
    assert summarize(facts).evaluation_passes == 0
    assert [s.forward_ms for s in facts.steps] == pytest.approx([7.0] * 6)


def test_the_data_wait_of_a_training_batch_after_evaluation_is_training_s(tmp_path):
    loop = _Loop(tmp_path, eval_grad=False)
    for _ in range(2):
        loop.train_step()
    loop.evaluate()
    loop.rec.data_begin()
    loop.clock.now += 0.050
    loop.rec.loader_batch(loop.train_iter, 50.0)  # the training batch's wait ends the span where it began
    assert loop.rec.timing.acc[DATA] == pytest.approx(50.0)
    assert loop.rec.timing.evaluation.ms == pytest.approx(125.0)


def _on_fake_cuda(loop: _Loop, monkeypatch) -> FakeCuda:
    """The loop's recorder on CUDA, faked: the device runs at half the host's pace (each
    host millisecond is two on the device), so a device time is told from a host one."""
    monkeypatch.setattr(loop.rec.built, "uses_cuda", lambda: True)
    return FakeCuda(lambda: loop.clock.now * 2000.0).install(monkeypatch)


@pytest.mark.parametrize("eval_grad", [False, True])
def test_an_evaluation_s_forwards_are_not_the_training_forward_s_device_time(tmp_path, monkeypatch, eval_grad):
    # On CUDA the forward's device time (events at its begin and end) replaces its host time:
    # the evaluation pass's forwards, inside the step before the boundary, must not be in it.
    loop = _Loop(tmp_path, eval_grad=eval_grad)
    cuda = _on_fake_cuda(loop, monkeypatch)
    loop.run()
    steps = loop.rec.steps
    assert cuda.events and len(steps) == 6  # timed on the (fake) device
    if eval_grad:  # twin: with gradients on, the pass is training's, 30 forwards more in its step
        assert max(s.forward_ms for s in steps) == pytest.approx(2 * 62.0)
        return
    assert [s.forward_ms for s in steps] == pytest.approx([2 * 2.0] * 6)  # with a pass inside or not


def _train_and_evaluate(rec, *, device="cuda", held_out_rows=4096) -> None:
    """A tiny training loop observed by ``rec``, with an evaluation pass after every third
    step: 20 forwards of ``held_out_rows`` rows under ``no_grad``, its metric read once."""
    import torch.nn.functional as F

    from torchboost.observe import Instrumentation

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 1024, device=device), torch.randint(0, 10, (256,), device=device)
    held_out = torch.randn(held_out_rows, 1024, device=device)
    with Instrumentation(rec):
        try:
            for step in range(40):
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % 3 == 2:
                    model.eval()
                    with torch.no_grad():
                        correct = sum((model(held_out).argmax(1) == 0).sum() for _ in range(20))
                    correct.item()  # the metric, read as scripts read it: the pass's work is done here
                    model.train()
        except StopObserving:
            pass


@pytest.mark.gpu
def test_on_cuda_an_evaluation_pass_is_not_in_the_training_forward(tmp_path):
    # The pass is 20 forwards of a batch 16 times the training one: were its device time in
    # the training forward's, that forward would be most of the pass's time.
    rec = StepRecorder(ObserveSpec(out_dir=str(tmp_path), steps=9, warmup=2, profile_active=0))
    _train_and_evaluate(rec)
    steps = rec.steps
    evaluated = [s for s in steps if s.eval_ms > 0]
    assert len(steps) == 9 and len(evaluated) == 3 and rec.built.uses_cuda()
    for s in evaluated:
        assert 0 < s.forward_ms < s.eval_ms / 4, (s.forward_ms, s.eval_ms)


class _EvalModeLoop(_Loop):
    """The loop above with ``model.eval()`` around its evaluation, gradients left on (a
    script that forgot ``torch.no_grad()``)."""

    def evaluate(self) -> None:
        self.model.eval()
        super().evaluate()
        self.model.train()


def test_evaluation_in_eval_mode_with_gradients_on_is_told_from_training(tmp_path):
    """The twin above (gradients on, train mode throughout) cannot be told; with the model
    in eval mode it is evaluation, its calls counted as building a graph for nothing."""
    loop = _EvalModeLoop(tmp_path, eval_grad=True)
    loop.run()
    facts = loop.rec.facts()
    summary = summarize(facts)
    assert [s.total_ms for s in facts.steps] == pytest.approx([7.0] * 6)
    assert summary.evaluation_passes == 2 and summary.evaluation_ms == pytest.approx(2 * 125.0)
    assert facts.evaluation.calls == facts.evaluation.grad_calls >= 60
    assert facts.evaluation.batch_size == 1 and facts.evaluation.train_batch_size == 1


def test_a_model_that_trains_in_eval_mode_is_training_after_its_first_backward(tmp_path):
    """Frozen batch norm: the model is put in eval mode once and trains so from then on. The
    first call after the switch is taken for evaluation until its backward comes; every later
    step is training's, whole."""
    loop = _Loop(tmp_path, eval_grad=True)
    try:
        for step in range(20):
            if step == 1:
                loop.model.eval()
            loop.train_step()
    except StopObserving:
        pass
    facts = loop.rec.facts()
    assert [s.total_ms for s in facts.steps] == pytest.approx([5.0] + [7.0] * 5)  # the first: its forward apart
    assert facts.steps[0].eval_ms == pytest.approx(2.0) and all(s.eval_ms == 0 for s in facts.steps[1:])


class _GradRecordingLoop(_EvalModeLoop):
    """Records, for each evaluation call, whether gradients were on while it ran."""

    def __init__(self, tmp_path) -> None:
        super().__init__(tmp_path, eval_grad=True)
        self.grad_in_calls: list[bool] = []

    def _forward(self, ms: float) -> None:
        self.rec.forward_begin(self.model, ())
        if not self.model.training:
            self.grad_in_calls.append(torch.is_grad_enabled())
        self.clock.now += ms / 1000
        self.rec.phase_end(FORWARD, ms)


def test_after_a_pass_every_other_evaluation_call_runs_without_gradients_and_both_are_timed(tmp_path):
    """The first pass runs as the script has it; from the next one every other call runs as
    under torch.no_grad(), gradients back on as it ends; both kinds' medians are recorded.
    The first pass is the twin: before a pass has ended with no backward in it, no call is
    run otherwise than the script has it."""
    loop = _GradRecordingLoop(tmp_path)
    loop.run()
    first, later = loop.grad_in_calls[:30], loop.grad_in_calls[30:]
    assert all(first) and later.count(False) == len(later) // 2 and torch.is_grad_enabled()
    seen = loop.rec.facts().evaluation
    assert seen.grad_call_ms == pytest.approx(2.0) and seen.no_grad_call_ms == pytest.approx(2.0)
    assert seen.passes == 2 and seen.timed_calls == len(loop.grad_in_calls) == 60
