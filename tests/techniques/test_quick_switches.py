"""Each technique's quick switch: what it turns on, that off puts back exactly, and when there is none."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchboost import _fp32_precision
from torchboost.techniques import fp32_math, optimizer as optimizer_technique, precision
from torchboost.techniques.optimizer import optimizer_impl
from torchboost.techniques.registry import ProbeContext, techniques


def _ctx(model=None, optimizer=None, **kw) -> ProbeContext:
    return ProbeContext(model=model, optimizer=optimizer, loader=None, device=kw.pop("device", "cpu"), **kw)


def _steps(fused_at: set[int], n: int = 4) -> torch.Tensor:
    """AdamW trained ``n`` steps, the quick switch on at the steps in ``fused_at``."""
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    switch = optimizer_technique.quick_switch(_ctx(model, opt))
    for i in range(n):
        model(torch.ones(2, 8)).pow(2).sum().backward()
        if i in fused_at:
            switch.on()
        opt.step()
        if i in fused_at:
            switch.off()
        opt.zero_grad()
    return model.weight.detach().clone()


def _plain(fused: bool, n: int = 4) -> torch.Tensor:
    """The same in plain PyTorch: AdamW built with fused=True, or as the script built it."""
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused or None)
    for _ in range(n):
        model(torch.ones(2, 8)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    return model.weight.detach().clone()


def test_the_switches_are_declared_by_their_techniques():
    assert {t.name for t in techniques() if t.quick_probe} == {"fp32_math", "precision", "optimizer", "cpu", "debug", "gc", "trackers"}


def test_the_fused_switch_steps_as_plain_pytorchs_fused_adamw():
    assert torch.allclose(_steps(fused_at={0, 1, 2, 3}), _plain(fused=True), atol=1e-6)


def test_twin_the_fused_switch_left_off_is_not_fused_adamw():
    # The for-loop and the fused kernel round differently: a switch that did nothing would match the loop.
    assert torch.equal(_steps(fused_at=set()), _plain(fused=False))


def test_the_fused_switch_puts_the_groups_back_exactly():
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = [dict((k, v) for k, v in g.items() if k != "params") for g in opt.param_groups]
    switch = optimizer_technique.quick_switch(_ctx(model, opt))
    switch.on()
    assert all(g["fused"] for g in opt.param_groups)
    switch.off()
    assert [dict((k, v) for k, v in g.items() if k != "params") for g in opt.param_groups] == before


def test_no_fused_switch_for_an_optimizer_without_a_fused_kernel_or_already_fused():
    model = nn.Linear(4, 4)
    assert optimizer_technique.quick_switch(_ctx(model, torch.optim.RMSprop(model.parameters()))) is None
    assert optimizer_technique.quick_switch(_ctx(model, torch.optim.Adam(model.parameters(), fused=True))) is None


def test_the_autocast_switch_runs_the_forward_in_bf16_and_hands_back_fp32():
    model = nn.Sequential(nn.Linear(8, 8))
    switch = precision.quick_switch(_ctx(model))
    seen = []
    model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    switch.on()
    out = model(torch.ones(2, 8))
    switch.off()
    model(torch.ones(2, 8))
    assert seen == [torch.bfloat16, torch.float32] and out.dtype == torch.float32
    assert "forward" not in model.__dict__  # the instance's forward put back as it was: none


def test_no_autocast_switch_where_the_scripts_own_autocast_is_on_or_the_model_is_compiled():
    model = nn.Linear(4, 4)
    assert precision.quick_switch(_ctx(model, autocast_dtype="bfloat16")) is None
    compiled = nn.Linear(4, 4)
    compiled._orig_mod = model  # what torch.compile's wrapper carries
    assert precision.quick_switch(_ctx(compiled)) is None
    assert precision.quick_switch(_ctx(model)) is not None  # the twin


def test_an_autocast_forward_that_raises_falls_back_and_says_so():
    class Picky(nn.Module):
        def forward(self, x):
            if torch.is_autocast_enabled("cpu"):
                raise RuntimeError("no bf16 here")
            return x * 2

    model = Picky()
    switch = precision.quick_switch(_ctx(model))
    switch.on()
    assert torch.equal(model(torch.ones(2)), torch.full((2,), 2.0))
    switch.off()
    assert switch.errors == ["RuntimeError: no bf16 here"]


@pytest.fixture
def torchs_default_fp32_math():
    """The backends at torch's default ("none") for the test, whatever an earlier test left; put back after."""
    holders = [h for h in map(_fp32_precision.holder, _fp32_precision.CPU_SWITCHES) if h is not None]
    if not holders:
        pytest.skip("this torch has no mkldnn fp32_precision")
    saved = [h.fp32_precision for h in holders]
    for holder in holders:
        holder.fp32_precision = "none"
    yield holders
    for holder, value in zip(holders, saved):
        holder.fp32_precision = value


def test_the_fp32_math_switch_sets_bf16_math_and_puts_the_setting_back(torchs_default_fp32_math):
    holders = torchs_default_fp32_math
    before = [h.fp32_precision for h in holders]
    switch = fp32_math.quick_switch(_ctx(device="cpu"))
    switch.on()
    assert [h.fp32_precision for h in holders] == ["bf16"] * len(holders)
    switch.off()
    assert [h.fp32_precision for h in holders] == before


def test_no_fp32_math_switch_when_the_script_set_its_own(torchs_default_fp32_math):
    holder = torchs_default_fp32_math[0]
    before = holder.fp32_precision
    holder.fp32_precision = "bf16"
    try:
        assert fp32_math.quick_switch(_ctx(device="cpu")) is None
    finally:
        holder.fp32_precision = before
    assert fp32_math.quick_switch(_ctx(device="cpu")) is not None  # the twin


def test_the_threads_switch_sizes_itself_by_the_load_and_puts_torchs_count_back():
    """Others took 90% of the machine: the switch gives torch the cores they left (one), and
    off puts back its own count. Twins: a quiet machine (10%) and no load measured give none."""
    from torchboost.techniques import cpu

    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        switch = cpu.quick_switch(_ctx(other_load_pct=90.0))
        target = cpu.contended_threads(cpu.probe().cpu_cores, 90.0)
        assert switch.finding_id == "threads.contended" and switch.setting == {"cpu.threads": target}
        switch.on()
        assert torch.get_num_threads() == target
        switch.off()
        assert torch.get_num_threads() == 4
        torch.set_num_threads(cpu.probe().cpu_cores)
        assert cpu.quick_switch(_ctx(other_load_pct=10.0)) is None
        assert cpu.quick_switch(_ctx()) is None
    finally:
        torch.set_num_threads(before)


def test_the_threads_switch_makes_exactly_a_trials_candidate():
    """A burst trial's candidate (``ctx.wanted``) is the count the switch sets, whatever the load.
    Twin: the count torch already runs with is no switch."""
    from torchboost.techniques import cpu

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert cpu.quick_switch(_ctx(wanted={"cpu.threads": 1})).setting == {"cpu.threads": 1}
        assert cpu.quick_switch(_ctx(wanted={"cpu.threads": 2})) is None
    finally:
        torch.set_num_threads(before)


def test_contended_threads_are_the_cores_others_leave():
    from torchboost.techniques.cpu import contended_threads

    assert contended_threads(2, 49.0) == 1 and contended_threads(16, 30.0) == 11
    assert contended_threads(2, 100.0) == 1  # at least one


def _stepped_on_a_device(monkeypatch) -> tuple[torch.optim.Optimizer, nn.Parameter]:
    """An Adam whose parameter lives on a device other than the CPU and that has stepped
    with its for-loop kernel, so its ``step`` is a CPU tensor, as torch keeps it when neither
    fused nor capturable is set. The device is "meta" standing in for a GPU (this machine
    has none): fused kernels are allowed there for the test's sake."""
    monkeypatch.setitem(optimizer_technique.FUSED_DEVICES, torch.optim.Adam, frozenset({"cpu", "cuda", "meta"}))
    monkeypatch.setattr(optimizer_impl, "_torch_steps_fused", lambda cls, device_type: True)  # torch refuses meta
    param = nn.Parameter(torch.zeros(4, device="meta"))
    opt = torch.optim.Adam([param], lr=0.1)
    opt.state[param] = {"step": torch.tensor(3.0), "exp_avg": torch.zeros_like(param),
                        "exp_avg_sq": torch.zeros_like(param)}
    return opt, param


def test_the_fused_switch_moves_an_adams_step_beside_its_parameter(monkeypatch):
    # The fused kernel reads ``step`` on the parameters' device; torch only moves it there in
    # load_state_dict, so turning fused on for an optimizer that already stepped must.
    opt, param = _stepped_on_a_device(monkeypatch)
    switch = optimizer_technique.quick_switch(_ctx(None, opt, device="meta"))
    switch.on()
    step = opt.state[param]["step"]
    assert step.device == param.device and step.dtype == torch.float32


def test_twin_flags_alone_leave_the_step_on_the_cpu(monkeypatch):
    # What the switch did before: the group flags alone, the step left where the loop kept it.
    opt, param = _stepped_on_a_device(monkeypatch)
    for group in opt.param_groups:
        group.update(fused=True, foreach=None)
    assert opt.state[param]["step"].device != param.device


def test_the_fused_switch_puts_the_step_back_with_its_count():
    # On and off around real steps: the count carries on, and the for-loop finds its step where
    # it keeps it (a CPU float), so the script's own steps after the probe run as before.
    model = nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    switch = optimizer_technique.quick_switch(_ctx(model, opt))
    for i in range(3):
        model(torch.ones(2, 4)).sum().backward()
        if i == 1:
            switch.on()
        opt.step()
        if i == 1:
            switch.off()
        opt.zero_grad()
    steps = [opt.state[p]["step"] for p in model.parameters()]
    assert [float(s) for s in steps] == [3.0, 3.0]
    assert all(s.device.type == "cpu" for s in steps)


def _trained_on_cuda(fused_at: set[int], n: int = 4) -> torch.Tensor:
    torch.manual_seed(0)
    model = nn.Linear(16, 16).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    switch = optimizer_technique.quick_switch(_ctx(model, opt, device="cuda"))
    for i in range(n):
        model(torch.ones(8, 16, device="cuda")).pow(2).mean().backward()
        if i in fused_at:
            switch.on()
        opt.step()
        if i in fused_at:
            switch.off()
        opt.zero_grad()
    torch.cuda.synchronize()
    assert all(opt.state[p]["step"].device.type == "cpu" for p in model.parameters())
    return model.weight.detach().cpu()


@pytest.mark.gpu
def test_gpu_the_fused_switch_steps_an_adamw_that_already_stepped():
    # Steps 0 and 1 on the for-loop kernel (CPU steps), 2 fused, 3 back on the loop: the same
    # weights as never switching, within the kernels' rounding.
    switched = _trained_on_cuda(fused_at={2})
    plain = _trained_on_cuda(fused_at=set())
    assert torch.allclose(switched, plain, atol=1e-5)
