"""Each technique's quick switch: what it turns on, that off puts back exactly, and when there is none."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchboost.techniques import fp32_math, optimizer as optimizer_technique, precision
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
    assert {t.name for t in techniques() if t.quick_probe} == {"fp32_math", "precision", "optimizer", "cpu"}


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
    holders = fp32_math._backends("cpu")
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
