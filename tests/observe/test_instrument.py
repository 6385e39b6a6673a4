"""The instrumentation in-process: what it measures, and that uninstall restores PyTorch."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.optim.optimizer as optim_mod
from torch import nn
from torch.nn.modules import module as nn_module
from torch.utils.data import DataLoader, TensorDataset

from torchboost.observe import Instrumentation, ObserveSpec, StepRecorder, StopObserving
from torchboost.observe.hooks.instrument import PATCHED_ATTRIBUTES


def _snapshot() -> dict[str, object]:
    state = {f"{getattr(o, '__name__', o)}.{n}": (o.__dict__[n] if isinstance(o, type) else getattr(o, n))
             for o, n in PATCHED_ATTRIBUTES}
    state["forward_pre_hooks"] = dict(nn_module._global_forward_pre_hooks)
    state["forward_hooks"] = dict(nn_module._global_forward_hooks)
    state["optimizer_pre_hooks"] = dict(optim_mod._global_optimizer_pre_hooks)
    state["optimizer_post_hooks"] = dict(optim_mod._global_optimizer_post_hooks)
    state["warning_filters"] = list(warnings.filters)
    return state


def assert_restored(before: dict[str, object]) -> None:
    """Every patched attribute is the original object again and no hook of ours is left."""
    after = _snapshot()
    for key, value in before.items():
        assert after[key] is value or after[key] == value, f"{key} was not restored"


def _spec(tmp_path, **kw) -> ObserveSpec:
    kw.setdefault("profile_active", 0)  # the profiler window is tested on its own
    return ObserveSpec(out_dir=str(tmp_path), **kw)


def test_uninstall_restores_every_patched_attribute(tmp_path):
    before = _snapshot()
    inst = Instrumentation(StepRecorder(_spec(tmp_path))).install()
    during = _snapshot()
    for owner, name in PATCHED_ATTRIBUTES:
        key = f"{getattr(owner, '__name__', owner)}.{name}"
        assert during[key] is not before[key], f"{key} was not patched"
    assert len(during["forward_hooks"]) == len(before["forward_hooks"]) + 1
    inst.uninstall()
    assert_restored(before)
    inst.uninstall()  # twice is harmless
    assert_restored(before)


def test_restore_check_detects_a_patch_left_behind(tmp_path):
    # The broken twin: without uninstall, the check above must fail.
    before = _snapshot()
    inst = Instrumentation(StepRecorder(_spec(tmp_path))).install()
    try:
        with pytest.raises(AssertionError):
            assert_restored(before)
    finally:
        inst.uninstall()


def test_second_install_is_refused(tmp_path):
    with Instrumentation(StepRecorder(_spec(tmp_path))):
        with pytest.raises(RuntimeError, match="already installed"):
            Instrumentation(StepRecorder(_spec(tmp_path))).install()


def _train(model, optimizer, loader, epochs=10):
    criterion = nn.MSELoss()  # a parameter-free module called outside the model
    for _ in range(epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def test_records_steps_phases_and_settings_of_an_optimizer_loop(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4)
    recorder = StepRecorder(_spec(tmp_path, steps=5, warmup=2))
    with Instrumentation(recorder), pytest.raises(StopObserving):
        _train(model, optimizer, loader)
    facts = recorder.facts()
    assert [s.index for s in facts.steps] == [2, 3, 4, 5, 6]
    assert facts.step_source == "optimizer"
    assert all(s.data_ms > 0 and s.forward_ms > 0 and s.backward_ms > 0 and s.optimizer_ms > 0 for s in facts.steps)
    assert all(s.total_ms >= s.data_ms + s.forward_ms + s.backward_ms + s.optimizer_ms for s in facts.steps)
    assert len(facts.losses) == 5 and all(loss > 0 for loss in facts.losses)
    assert facts.loader.batch_size == 4 and facts.loader.num_batches == 8
    # the loop's own epochs=10, read from its frame: not the one epoch of the loader
    assert (facts.planned_steps, facts.planned_from) == (80, "the script's epochs = 10 x 8 batches per epoch")
    assert facts.model.class_name == "Sequential" and facts.model.parameters == 4 * 8 + 8 + 8 + 1
    assert facts.optimizer.class_name == "SGD"
    assert facts.ended == "stopped" and facts.target_steps == 5
    assert facts.env["torch_version"] == torch.__version__


def test_manual_updates_use_backward_as_the_step_boundary(tmp_path):
    w = torch.randn(3, requires_grad=True)
    recorder = StepRecorder(_spec(tmp_path, steps=4, warmup=1))
    with Instrumentation(recorder), pytest.raises(StopObserving):
        for _ in range(20):
            (w * w).sum().backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad = None
    facts = recorder.facts()
    assert facts.step_source == "backward"
    assert len(facts.steps) == 4 and len(facts.losses) == 4


def test_autocast_dtype_is_seen_inside_forward(tmp_path):
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    recorder = StepRecorder(_spec(tmp_path, steps=2, warmup=1))
    with Instrumentation(recorder), pytest.raises(StopObserving):
        for _ in range(10):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(2, 4)).float().sum()
            loss.backward()
            optimizer.step()
    precision = recorder.facts().precision
    assert precision.autocast and precision.autocast_dtype == "bfloat16"


def test_without_autocast_no_dtype_is_recorded(tmp_path):
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    recorder = StepRecorder(_spec(tmp_path, steps=2, warmup=1))
    with Instrumentation(recorder), pytest.raises(StopObserving):
        for _ in range(10):
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
    assert recorder.facts().precision.autocast_dtype is None


def test_a_forward_that_raises_does_not_hide_later_forwards(tmp_path):
    class Flaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def forward(self, x, fail=False):
            y = self.inner(x)
            if fail:
                raise ValueError("caught by the script")
            return y

    model = Flaky()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    recorder = StepRecorder(_spec(tmp_path, steps=3, warmup=0))
    with Instrumentation(recorder), pytest.raises(StopObserving):
        with pytest.raises(ValueError):
            model(torch.randn(1, 2), fail=True)
        for _ in range(10):
            model(torch.randn(1, 2)).sum().backward()
            optimizer.step()
    assert all(s.forward_ms > 0 for s in recorder.facts().steps)


def test_only_the_first_optimizer_marks_boundaries(tmp_path):
    # Two optimizers stepping per iteration (a GAN's shape) are still one step each.
    a, b = nn.Linear(2, 1), nn.Linear(2, 1)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.01)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.01)
    recorder = StepRecorder(_spec(tmp_path, steps=3, warmup=1))
    with Instrumentation(recorder), pytest.raises(StopObserving) as stop:
        for i in range(10):
            a(torch.randn(1, 2)).sum().backward()
            opt_a.step()
            b(torch.randn(1, 2)).sum().backward()
            opt_b.step()
    # 1 warm-up + 3 recorded: stopped from opt_a's step of iteration index 3.
    assert stop.traceback is not None and i == 3
    assert len(recorder.facts().steps) == 3


def test_after_warmup_hooks_move_from_global_to_the_roots_and_are_removed(tmp_path):
    model = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    before = _snapshot()
    recorder = StepRecorder(_spec(tmp_path, steps=3, warmup=2))
    inst = Instrumentation(recorder).install()
    try:
        with pytest.raises(StopObserving):
            for i in range(10):
                model(torch.randn(1, 2)).sum().backward()
                optimizer.step()
                if i == 2:  # warm-up is over: only the root carries hooks now
                    assert dict(nn_module._global_forward_hooks) == before["forward_hooks"]
                    assert len(model._forward_hooks) == 1 and not model[0]._forward_hooks
    finally:
        inst.uninstall()
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert_restored(before)
    assert all(s.forward_ms > 0 for s in recorder.facts().steps)


def test_grad_scaler_is_seen_and_losses_are_unscaled(tmp_path):
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    recorder = StepRecorder(_spec(tmp_path, steps=3, warmup=1))
    seen = []
    with Instrumentation(recorder), pytest.raises(StopObserving):
        for _ in range(10):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            seen.append(loss.item())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    facts = recorder.facts()
    assert facts.precision.grad_scaler
    # Steps are counted from the optimizer's first step; the last 3 losses are the recorded ones.
    assert facts.losses == pytest.approx(seen[-3:], rel=1e-5)


def test_compiled_model_is_timed_and_keeps_global_hooks(tmp_path):
    from torch._dynamo.utils import counters

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    compiled = torch.compile(model, backend="eager")  # dynamo tracing without codegen: fast
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    recorder = StepRecorder(_spec(tmp_path, steps=3, warmup=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails; torch's one about global hooks is filtered
        with Instrumentation(recorder) as inst, pytest.raises(StopObserving):
            for i in range(10):
                compiled(torch.randn(2, 4)).sum().backward()
                optimizer.step()
                if i == 0:
                    frames_after_first_call = counters["frames"]["total"]
    assert not inst._narrowed  # swapping hooks would invalidate the compiled code's guards
    assert counters["frames"]["total"] == frames_after_first_call  # no recompilation
    facts = recorder.facts()
    assert facts.model.compiled and facts.model.parameters == 4 * 8 + 8 + 8 + 1
    assert all(s.forward_ms > 0 for s in facts.steps)


@pytest.mark.parametrize("wrapped", [True, False])
def test_a_module_under_observation_can_still_be_scripted(tmp_path, monkeypatch, wrapped):
    """``torch.jit.script(model)`` mid-run: TorchScript compiles a module's hooks with it, and
    the observer's own are Python; they are off while it scripts, and back after (the next
    steps are still timed). Twin: with the wrapper taken out, scripting fails, as it did."""
    from torch._dynamo.utils import counters

    monkeypatch.setitem(counters, "frames", {})  # no compile ran before, in this process: hooks go on the root
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    recorder = StepRecorder(_spec(tmp_path, steps=4, warmup=2))
    with Instrumentation(recorder) as inst, pytest.raises(StopObserving):
        if not wrapped:
            monkeypatch.setattr(torch.jit, "script", inst._script)
        for i in range(10):
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
            if i == 3:
                if wrapped:
                    assert isinstance(torch.jit.script(model), torch.jit.ScriptModule)
                else:
                    with pytest.raises(RuntimeError, match="Unknown type name"):
                        torch.jit.script(model)
                    raise StopObserving()
    assert inst._narrowed and all(s.forward_ms > 0 for s in recorder.facts().steps)
