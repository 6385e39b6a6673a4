"""Settings applied from outside a script: loader, threads, bf16 around the root, optimizer kernels."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from torchboost import BoostConfig
from torchboost.nocode import Applier
from torchboost.plan import Plan


def _data():
    return TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))


class _Stream(IterableDataset):
    def __iter__(self):
        yield from range(4)


def test_loader_settings_apply_to_map_style_only_and_are_restored():
    original_init = DataLoader.__init__
    applier = Applier(Plan.applying({"loader.num_workers": 2, "loader.persistent_workers": True, "loader.prefetch_factor": 4}))
    applier.install()
    try:
        loader = DataLoader(_data(), batch_size=4, shuffle=True)
        assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 4)
        assert loader.batch_size == 4  # the script's own arguments are kept
        stream = DataLoader(_Stream(), batch_size=2)
        assert stream.num_workers == 0  # an unsharded stream would repeat per worker
    finally:
        applier.uninstall()
    assert DataLoader.__init__ is original_init
    assert DataLoader(_data(), batch_size=4).num_workers == 0


def test_zero_workers_drop_worker_only_options():
    with_workers = DataLoader.__init__
    applier = Applier(Plan.applying({"loader.num_workers": 0})).install()
    try:
        loader = DataLoader(_data(), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=3)
        assert loader.num_workers == 0 and not loader.persistent_workers
    finally:
        applier.uninstall()
    assert DataLoader.__init__ is with_workers


def test_threads_are_set_at_install():
    before = torch.get_num_threads()
    applier = Applier(Plan.applying({"cpu.threads": 1})).install()
    try:
        assert torch.get_num_threads() == 1
        assert "intra-op threads set to 1" in applier.notes
    finally:
        applier.uninstall()
        torch.set_num_threads(before)


def test_bf16_runs_around_the_root_forward_from_the_second_call():
    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(8, 8)

        def forward(self, x):
            seen.append(torch.is_autocast_enabled("cpu"))
            return self.inner(x)

    from torch.nn.modules import module as nn_module

    model = Probe()
    applier = Applier(Plan.applying({"precision.mode": "bf16"})).install()
    try:
        assert nn_module._global_forward_pre_hooks  # watching for the root
        model(torch.randn(2, 8)).sum().backward()
        # Kept until the first optimizer step (what else the loop trains), then gone: no
        # per-call hook cost for the rest of the run.
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        assert not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks
        out = model(torch.randn(2, 8))
    finally:
        applier.uninstall()
    assert seen == [False, True]
    assert out.dtype == torch.float32  # cast back so the loss is computed in fp32
    assert "forward" in model.__dict__


def test_optimizer_switches_kernels_before_its_first_step():
    model = nn.Linear(4, 4)
    reference = nn.Linear(4, 4)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    applier = Applier(Plan.applying({"optimizer.implementation": "fused"})).install()
    try:
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
    finally:
        applier.uninstall()
    reference(torch.ones(2, 4)).sum().backward()
    ref_opt.step()
    assert optimizer.param_groups[0]["fused"] is True
    assert ref_opt.param_groups[0]["fused"] is None  # untouched once uninstalled
    torch.testing.assert_close(model.weight, reference.weight, rtol=1e-6, atol=1e-7)  # same maths


def test_fp16_is_refused_without_the_booster():
    with pytest.raises(ValueError, match="fp16"):
        Applier(Plan.applying({"precision.mode": "fp16"}))


def test_a_plan_applies_only_concrete_changes():
    config = BoostConfig.off().replace(
        loader={"num_workers": 2, "pin_memory": "auto"}, cpu={"threads": 1},
        memory={"channels_last": True}, precision={"mode": "bf16"}, accumulation={"steps": 2},
    )
    plan = Plan.of(config)
    assert plan.apply == {"loader.num_workers": 2, "cpu.threads": 1, "precision.mode": "bf16",
                          "memory.channels_last": True}
    assert plan.config == config  # whole, for a Booster in the script
    assert any("loader.pin_memory" in n and "auto" in n for n in plan.notes)
    assert any("accumulation.steps" in n and "Booster" in n for n in plan.notes)
    assert (Plan.of(BoostConfig.off()).apply, Plan.of(BoostConfig.off()).notes) == ({}, ())
    # the notes on "auto" speak only of what the user's file writes
    assert not any("pin_memory" in n for n in Plan.of(config, written={"cpu.threads"}).notes)


def test_a_plan_reads_back_as_it_was_written():
    plan = Plan.of(BoostConfig.off().replace(loader={"num_workers": 2}, accumulation={"steps": 2}))
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    twin = Plan.from_dict({**plan.to_dict(), "apply": {}})  # the twin: another plan reads back as another
    assert twin != plan and twin.config == plan.config


def test_root_is_the_trained_model_not_a_module_called_under_no_grad():
    teacher = nn.Linear(8, 2)
    model = nn.Linear(8, 2)
    loss_fn = nn.MSELoss()
    applier = Applier(Plan.applying({"precision.mode": "bf16"})).install()
    try:
        with torch.no_grad():
            target = teacher(torch.randn(4, 8))
        for _ in range(2):
            loss_fn(model(torch.randn(4, 8)), target).backward()
    finally:
        applier.uninstall()
    assert "forward" in model.__dict__
    assert "forward" not in teacher.__dict__ and "forward" not in loss_fn.__dict__


class _Combined(nn.Module):
    """The three modules of the script's body, as one model: the twin of three apart."""

    def __init__(self, enc1: nn.Module, enc2: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.enc1, self.enc2, self.head = enc1, enc2, head

    def forward(self, x):
        return self.head(self.enc1(x) + self.enc2(x))


def _script(apart: bool) -> Applier:
    """The script's body, in a function of its own as a user's main() (a test function's
    names are not read: pytest's rewritten asserts call locals() in it)."""
    enc1, enc2, head = nn.Linear(4, 8), nn.Linear(4, 8), nn.Linear(8, 1)
    model = _Combined(enc1, enc2, head)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    applier = Applier(Plan.applying({"precision.mode": "bf16"})).install()
    try:
        for _ in range(2):
            x = torch.randn(2, 4)
            out = head(enc1(x) + enc2(x)) if apart else model(x)
            out.pow(2).mean().backward()
            optimizer.step()
    finally:
        applier.uninstall()
    return applier


@pytest.mark.parametrize("apart", [True, False])  # twin: the same maths inside one model
def test_bf16_from_outside_says_which_modules_it_covers(apart):
    applier = _script(apart)
    [line] = [n for n in applier.effect if "bf16 autocast" in n]
    if apart:
        assert line == ("bf16 autocast around Linear.forward (covers enc1, 1 of the 3 modules the loop trains; "
                        "enc2 and head run outside it)")
        assert line in applier.notes  # a trial's facts say it too
    else:
        assert line == "bf16 autocast around _Combined.forward"


def test_the_first_step_hook_stays_through_the_optimizers_own_loop_over_its_hooks():
    # Removed inside that loop, the loop fails: "OrderedDict mutated during iteration".
    import torch.optim.optimizer as optim_module

    threads = torch.get_num_threads()
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    applier = Applier(Plan.applying({"cpu.threads": 1})).install()
    after = optim_module.register_optimizer_step_pre_hook(lambda *a: None)  # the observer's, after it
    try:
        for _ in range(3):
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
    finally:
        after.remove()
        applier.uninstall()
        torch.set_num_threads(threads)
    assert applier.effect_at == "the first optimizer step"


def test_twin_a_pre_hook_that_removes_itself_breaks_the_step():
    import torch.optim.optimizer as optim_module

    handles = []
    handles.append(optim_module.register_optimizer_step_pre_hook(lambda *a: handles[0].remove()))
    handles.append(optim_module.register_optimizer_step_pre_hook(lambda *a: None))  # the observer's, after it
    model = nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    try:
        with pytest.raises(RuntimeError, match="mutated during iteration"):
            torch.optim.SGD(model.parameters(), lr=0.1).step()
    finally:
        for handle in handles:
            handle.remove()


class _Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.parametrize("forwards", [1, 3])  # the twin of one: micro-batches before the first step
def test_the_root_is_boosted_once_however_often_it_runs_before_the_first_step(forwards):
    model = _Blocks()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    applier = Applier(Plan.applying({"checkpointing.scope": "blocks"})).install()
    try:
        for _ in range(forwards):
            model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    finally:
        applier.uninstall()
    assert [note.split(" (")[0] for note in applier.notes] == ["activation checkpointing on 3 blocks"]
