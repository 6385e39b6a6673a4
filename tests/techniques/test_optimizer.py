"""Optimizer technique: a rebuilt foreach/fused optimizer continues exactly where the old one was."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.torch_version import TorchVersion

from torchboost.techniques.optimizer import (
    FUSED_DEVICES,
    apply_optimizer_implementation,
    current_implementation,
    fused_kernel_on,
    resolve_optimizer,
)

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # a descriptor only: resolve_optimizer does not allocate on it


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def two_groups(model: nn.Module) -> list[dict]:
    return [
        {"params": model[0].parameters(), "lr": 1e-2, "weight_decay": 0.0},
        {"params": model[2].parameters(), "lr": 3e-3, "weight_decay": 0.1},
    ]


OPTIMIZERS = {
    "Adam": lambda m: torch.optim.Adam(two_groups(m), betas=(0.8, 0.95), amsgrad=True),
    "AdamW": lambda m: torch.optim.AdamW(two_groups(m)),
    "SGD": lambda m: torch.optim.SGD(two_groups(m), momentum=0.9, nesterov=True),
    "Adagrad": lambda m: torch.optim.Adagrad(two_groups(m)),
    "RMSprop": lambda m: torch.optim.RMSprop(two_groups(m), momentum=0.5),
}

_DATA = torch.Generator().manual_seed(1)
BATCHES = [(torch.randn(16, 6, generator=_DATA), torch.randn(16, 3, generator=_DATA)) for _ in range(6)]


def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches) -> None:
    """Plain PyTorch steps, written without torchboost."""
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def assert_continues_like_original(make_optimizer, rebuild, atol: float = 1e-6) -> None:
    """After 3 steps, ``rebuild(optimizer)`` then 3 more steps must match the original's 6 steps."""
    model = make_model()
    optimizer = make_optimizer(model)
    train(model, optimizer, BATCHES[:3])
    twin_model, twin_optimizer = copy.deepcopy((model, optimizer))

    train(model, optimizer, BATCHES[3:])  # the reference: plain PyTorch continuing
    rebuilt = rebuild(twin_optimizer)
    train(twin_model, rebuilt, BATCHES[3:])
    for (name, a), b in zip(model.named_parameters(), twin_model.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=atol, msg=f"{name} diverged")


def _broken_rebuild_fresh(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    # Same class, groups and hyperparameters, fused, but the state (moments, steps) is lost.
    groups = [{k: v for k, v in g.items() if k not in ("foreach", "fused")} for g in optimizer.param_groups]
    return type(optimizer)(groups, fused=True)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD", "Adagrad"])
@pytest.mark.parametrize("implementation", ["foreach", "fused"])
def test_rebuilt_optimizer_continues_like_the_original(name, implementation):
    assert_continues_like_original(
        OPTIMIZERS[name], lambda opt: apply_optimizer_implementation(opt, implementation)
    )


def test_foreach_rebuild_of_an_optimizer_without_fused():
    assert_continues_like_original(
        OPTIMIZERS["RMSprop"], lambda opt: apply_optimizer_implementation(opt, "foreach")
    )


@pytest.mark.parametrize("name", ["Adam", "SGD"])
def test_check_catches_a_rebuild_that_loses_the_state(name):
    with pytest.raises(AssertionError):
        assert_continues_like_original(OPTIMIZERS[name], _broken_rebuild_fresh)


def test_groups_hyperparameters_and_state_are_preserved():
    model = make_model()
    optimizer = OPTIMIZERS["Adam"](model)
    train(model, optimizer, BATCHES[:2])
    rebuilt = apply_optimizer_implementation(optimizer, "fused")

    assert type(rebuilt) is torch.optim.Adam and rebuilt is not optimizer
    assert current_implementation(rebuilt) == "fused" and current_implementation(optimizer) == "default"
    assert [g["lr"] for g in rebuilt.param_groups] == [1e-2, 3e-3]
    assert [g["weight_decay"] for g in rebuilt.param_groups] == [0.0, 0.1]
    assert all(g["betas"] == (0.8, 0.95) and g["amsgrad"] for g in rebuilt.param_groups)
    for old, new in zip(optimizer.param_groups, rebuilt.param_groups):
        assert [id(p) for p in old["params"]] == [id(p) for p in new["params"]]
    for p in model.parameters():
        assert float(rebuilt.state[p]["step"]) == 2.0
        assert torch.equal(rebuilt.state[p]["exp_avg"], optimizer.state[p]["exp_avg"])


def test_default_and_unchanged_return_the_same_object():
    model = make_model()
    optimizer = OPTIMIZERS["Adam"](model)
    assert apply_optimizer_implementation(optimizer, "default") is optimizer
    fused = apply_optimizer_implementation(optimizer, "fused")
    assert apply_optimizer_implementation(fused, "fused") is fused


def test_impossible_rebuilds_say_what_to_do():
    model = make_model()
    with pytest.raises(ValueError, match="no fused implementation"):
        apply_optimizer_implementation(OPTIMIZERS["RMSprop"](model), "fused")
    with pytest.raises(ValueError, match="expected default"):
        apply_optimizer_implementation(OPTIMIZERS["Adam"](model), "auto")


@pytest.mark.parametrize(
    "name, device, expected",
    [
        ("Adam", CPU, "fused"),
        ("AdamW", CUDA, "fused"),
        ("SGD", CPU, "fused"),
        ("Adagrad", CUDA, "fused"),
        ("RMSprop", CUDA, "foreach"),  # no fused kernel; foreach has real kernels on CUDA
        ("RMSprop", CPU, "default"),   # foreach only loops on CPU
    ],
)
def test_auto_picks_fused_then_foreach_then_default(name, device, expected):
    choice, reason = resolve_optimizer("auto", OPTIMIZERS[name](make_model()), device=device)
    assert choice == expected, reason
    assert name in reason and device.type in reason


def test_explicit_requests():
    adam = OPTIMIZERS["Adam"](make_model())
    rms = OPTIMIZERS["RMSprop"](make_model())
    assert resolve_optimizer("default", adam, device=CPU)[0] == "default"
    choice, reason = resolve_optimizer("foreach", adam, device=CPU)
    assert choice == "foreach" and "loop" in reason
    choice, reason = resolve_optimizer("fused", rms, device=CUDA)
    assert choice == "foreach" and reason.startswith("fused requested but not available")


def test_user_subclasses_and_unsupported_setups_stay_default():
    class MyAdam(torch.optim.Adam):
        pass

    choice, reason = resolve_optimizer("auto", MyAdam(make_model().parameters()), device=CPU)
    assert choice == "default" and "MyAdam" in reason

    lbfgs = torch.optim.LBFGS(make_model().parameters())
    assert resolve_optimizer("fused", lbfgs, device=CUDA)[0] == "default"

    differentiable = torch.optim.Adam(make_model().parameters(), differentiable=True)
    choice, reason = resolve_optimizer("auto", differentiable, device=CUDA)
    assert choice == "default" and "differentiable" in reason

    complex_param = torch.optim.Adam([nn.Parameter(torch.zeros(3, dtype=torch.complex64))])
    choice, reason = resolve_optimizer("auto", complex_param, device=CPU)
    assert choice == "default" and "complex" in reason


class _RefusingAdagrad(torch.optim.Adagrad):
    """Adagrad as torch before 2.12 has it on CUDA, standing in on the CPU: ``fused=True`` is
    accepted when built and refused in the first ``step()``, the script's own."""

    @torch.no_grad()
    def step(self, closure=None):
        if any(group["fused"] for group in self.param_groups):
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of "
                               "supported devices: ['cuda'] but torch.float32 and cpu")
        return super().step(closure)


def test_a_fused_step_torch_refuses_on_the_device_is_never_chosen(monkeypatch):
    monkeypatch.setitem(FUSED_DEVICES, _RefusingAdagrad, frozenset({"cpu", "cuda"}))
    refusing = _RefusingAdagrad(make_model().parameters())
    assert not fused_kernel_on(_RefusingAdagrad, "cpu")
    choice, reason = resolve_optimizer("auto", refusing, device=CPU)
    assert choice == "default" and "no fused kernel on cpu" in reason
    with pytest.raises(ValueError, match="no fused kernel on cpu"):
        apply_optimizer_implementation(refusing, "fused")
    refusing.step()  # untouched: its own for-loop step still runs


def test_twin_the_table_alone_would_have_chosen_it_and_its_step_raised(monkeypatch):
    monkeypatch.setitem(FUSED_DEVICES, _RefusingAdagrad, frozenset({"cpu", "cuda"}))
    assert "cpu" in FUSED_DEVICES[_RefusingAdagrad]  # what the table says
    model = make_model()
    model(torch.ones(2, 6)).sum().backward()
    built = _RefusingAdagrad(model.parameters(), fused=True)  # accepted when built
    with pytest.raises(RuntimeError, match="supported devices"):
        built.step()
    assert fused_kernel_on(torch.optim.Adagrad, "cpu")  # torch's own Adagrad steps fused here


def _counted_steps(probe) -> int:
    """The global optimizer step post hooks' calls while ``probe`` runs (the hooks an observer
    counts the script's steps by)."""
    calls = []
    handle = register_optimizer_step_post_hook(lambda *args: calls.append(args))
    try:
        probe()
    finally:
        handle.remove()
    return len(calls)


def test_asking_torch_for_a_fused_step_is_no_step_of_the_script(monkeypatch):
    class _Probed(torch.optim.AdamW):
        pass

    monkeypatch.setitem(FUSED_DEVICES, _Probed, frozenset({"cpu"}))
    assert _counted_steps(lambda: fused_kernel_on(_Probed, "cpu")) == 0


def test_twin_a_fused_step_taken_plainly_is_counted_as_the_scripts():
    param = torch.zeros(1, requires_grad=True)
    param.grad = torch.zeros_like(param)
    assert _counted_steps(lambda: torch.optim.AdamW([param], lr=0.0, fused=True).step()) == 1


class _OlderAdagrad(torch.optim.Adagrad):
    """Adagrad's step as torch before 2.12 writes it: its fused check leaves CUDA out."""

    def _init_group(self, group, *args):
        from torch.optim.optimizer import _device_dtype_check_for_fused

        for p in group["params"]:
            if group["fused"]:
                _device_dtype_check_for_fused(p, cuda_unsupported=True)
        return super()._init_group(group, *args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="reads torch's declaration where no GPU is here to ask")
def test_without_the_device_here_torch_s_declaration_is_read_cuda_left_out_where_the_step_refuses_it(monkeypatch):
    monkeypatch.setitem(FUSED_DEVICES, _OlderAdagrad, frozenset({"cpu", "cuda"}))
    assert not fused_kernel_on(_OlderAdagrad, "cuda")
    choice, reason = resolve_optimizer("auto", _OlderAdagrad(make_model().parameters()), device=CUDA)
    assert choice != "fused" and "no fused kernel on cuda" in reason
    assert fused_kernel_on(_OlderAdagrad, "cpu")  # the CPU's kernel it has


@pytest.mark.skipif(torch.cuda.is_available(), reason="reads torch's declaration where no GPU is here to ask")
def test_twin_torch_s_own_adagrad_steps_fused_on_cuda_from_2_12():
    assert fused_kernel_on(torch.optim.Adagrad, "cuda") == (TorchVersion(torch.__version__) >= "2.12")
