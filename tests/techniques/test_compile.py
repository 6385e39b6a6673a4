"""apply_compile: parity with eager, regional scope, eager fallback, recompile limit, resolution.

Only one real (Inductor) compile runs in this file, shared by a module fixture; every
other test uses dynamo with the "eager" backend or a backend that raises, which costs
milliseconds to a second.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
import torch._dynamo
from torch import nn

from torchboost.config import Overlay
from torchboost.techniques.compile import CompileConfig, CompileFacts, CompileTuning, GPU_MODES, TECHNIQUE
from torchboost.env import Environment
from torchboost.techniques.compile.compile_candidates import (
    AUTOTUNE_MIN_COMPILE_S, autotune_compile_s, autotune_refusal,
)
from torchboost.techniques.registry import TuneContext
from torchboost.techniques.compile import (
    CompileStats,
    CompileWarning,
    apply_compile,
    find_repeated_blocks,
    remove_compile,
    resolve_compile,
)


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.ff(self.norm(x)))


class _Stack(nn.Module):
    def __init__(self, width: int = 8, depth: int = 3) -> None:
        super().__init__()
        self.inp = nn.Linear(4, width)
        self.blocks = nn.ModuleList(_Block(width) for _ in range(depth))
        self.out = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def _plain() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _env(**overrides) -> Environment:
    base = dict(
        device="cpu", torch_version=torch.__version__, cpu_cores=2, ram_bytes=1, ram_available_bytes=1
    )
    return Environment(**{**base, **overrides})


def _assert_close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5) -> None:
    assert a.shape == b.shape
    assert (a - b).abs().max().item() <= atol, (a - b).abs().max().item()


def _raising_backend(gm, example_inputs):
    raise RuntimeError("backend refuses this graph\nsecond line that must not show")


def _forward_backward(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return out.detach(), grads


# ------------------------------------------------- the one real compile (Inductor, regional)


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(0)
    model = _Stack()
    eager = copy.deepcopy(model)
    keys_before = list(model.state_dict())
    stats = apply_compile(model, mode="default", scope="regional")
    x = torch.randn(5, 4)
    out, grads = _forward_backward(model, x)
    first_call_s = stats.first_call_s
    out2, _ = _forward_backward(model, x)
    ref_out, ref_grads = _forward_backward(eager, x)
    return dict(
        model=model, eager=eager, stats=stats, keys_before=keys_before, x=x, out=out, out2=out2,
        grads=grads, ref_out=ref_out, ref_grads=ref_grads, first_call_s=first_call_s,
    )


def test_compiled_matches_eager_in_fp32(compiled):
    _assert_close(compiled["out"], compiled["ref_out"])
    _assert_close(compiled["out2"], compiled["ref_out"])
    for g, ref in zip(compiled["grads"], compiled["ref_grads"]):
        _assert_close(g, ref)


def test_parity_check_catches_a_perturbed_model(compiled):
    wrong = copy.deepcopy(compiled["eager"])
    with torch.no_grad():
        wrong.blocks[1].ff.bias.add_(1e-3)
    with pytest.raises(AssertionError):
        _assert_close(compiled["out"], wrong(compiled["x"]).detach())


def test_regional_compiles_each_repeated_block(compiled):
    stats = compiled["stats"]
    assert stats.scope == "regional"
    assert stats.regions == ["blocks.0", "blocks.1", "blocks.2"]
    assert "forward" not in compiled["model"].__dict__  # the top level stays eager
    assert all("forward" in b.__dict__ for b in compiled["model"].blocks)
    assert not stats.fell_back and stats.error is None


def test_compile_keeps_the_model_object_and_state_dict_keys(compiled):
    model = compiled["model"]
    assert isinstance(model, _Stack)
    keys = list(model.state_dict())
    assert keys == compiled["keys_before"] == list(compiled["eager"].state_dict())


def test_first_call_time_recorded_once(compiled):
    assert compiled["first_call_s"] is not None and compiled["first_call_s"] > 0
    assert compiled["stats"].first_call_s == compiled["first_call_s"]  # later calls add nothing


# ----------------------------------------------------------------- scope and bookkeeping


def test_find_repeated_blocks():
    assert [n for n, _ in find_repeated_blocks(_Stack(depth=2))] == ["blocks.0", "blocks.1"]
    assert find_repeated_blocks(_plain()) == []  # repeated Linear layers are not blocks
    nested = nn.Sequential(_Stack(depth=2), _Stack(depth=2))  # the outer repeat wins
    assert [n for n, _ in find_repeated_blocks(nested)] == ["0", "1"]


def test_regional_without_repeated_block_compiles_the_whole_model():
    model = _plain()
    eager = copy.deepcopy(model)
    stats = apply_compile(model, mode="default", scope="regional", _backend="eager")
    assert stats.scope == "model" and stats.regions == [""]
    assert "no repeated block" in stats.scope_reason
    assert "forward" in model.__dict__
    x = torch.randn(3, 4)
    _assert_close(model(x), eager(x))
    assert list(model.state_dict()) == list(eager.state_dict())


def test_mode_off_does_nothing():
    model = _Stack()
    stats = apply_compile(model, mode="off", scope="regional")
    assert stats == CompileStats(mode="off", scope="regional", scope_reason="compile is off")
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_remove_compile_and_no_double_compile():
    model = _Stack(depth=2)
    apply_compile(model, mode="default", scope="regional", _backend="eager")
    with pytest.raises(ValueError, match="remove_compile"):
        apply_compile(model, mode="default", scope="regional", _backend="eager")
    assert remove_compile(model) == 2
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_a_deepcopy_of_a_compiled_model_runs_its_own_weights():
    model = _Stack(depth=2)
    apply_compile(model, mode="default", scope="regional", _backend="eager")
    twin = copy.deepcopy(model)  # e.g. an EMA copy
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    x = torch.randn(3, 4)
    eager_twin = copy.deepcopy(twin)
    remove_compile(eager_twin)
    _assert_close(twin(x), eager_twin(x))
    with pytest.raises(AssertionError):  # the copy is not secretly running the original
        _assert_close(twin(x), model(x))


@pytest.mark.parametrize("mode, scope", [("fast", "model"), ("default", "layers")])
def test_apply_compile_rejects_bad_arguments(mode, scope):
    with pytest.raises(ValueError, match="compile."):
        apply_compile(_plain(), mode=mode, scope=scope)


# ------------------------------------------------------------------------ eager fallback


def _train(model: nn.Module, steps: int = 4) -> nn.Module:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(3)
    for _ in range(steps):
        x, y = torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return model


@pytest.mark.parametrize("scope", ["model", "regional"])
def test_failing_compile_trains_in_eager_with_one_warning(scope, recwarn):
    torch.manual_seed(0)
    model = _Stack()
    control = copy.deepcopy(model)
    stats = apply_compile(model, mode="default", scope=scope, _backend=_raising_backend)
    _train(model)
    fallbacks = [w for w in recwarn if issubclass(w.category, CompileWarning)]
    assert len(fallbacks) == 1
    assert "RuntimeError: backend refuses this graph" in str(fallbacks[0].message)
    assert "second line" not in str(fallbacks[0].message)
    assert stats.fell_back and stats.error == "RuntimeError: backend refuses this graph"
    # The fallback is plain eager: weights equal a plain PyTorch run of the same steps.
    for p, q in zip(model.parameters(), _train(control).parameters()):
        assert torch.equal(p, q)


def test_an_error_in_user_code_is_not_a_compile_failure():
    model = nn.Linear(4, 2)
    stats = apply_compile(model, mode="default", scope="model", _backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        with pytest.raises(RuntimeError, match="shape|size"):
            model(torch.randn(3, 5))  # wrong width: eager raises the same, so it is the user's
    assert not stats.fell_back


def test_recompile_limit_hit_is_reported_once(recwarn):
    model = _Block(4)
    stats = apply_compile(model, mode="default", scope="model", _backend="eager")
    with torch._dynamo.config.patch(recompile_limit=1):
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float64, torch.float16):
            model.to(dtype)
            model(torch.randn(2, 4, dtype=dtype))
    hits = [w for w in recwarn if issubclass(w.category, CompileWarning)]
    assert stats.recompile_limit_hit
    assert len(hits) == 1 and "recompile limit" in str(hits[0].message)
    assert not stats.fell_back


# -------------------------------------------------------------------------- resolve_compile


def test_resolve_compile_is_off_when_inductor_cannot_run():
    config, reason = resolve_compile(CompileConfig(mode="default"), _env(compiler=""))
    assert config.mode == "off" and "no C++ compiler" in reason
    no_triton = _env(device="cuda", triton=False)
    config, reason = resolve_compile(CompileConfig(mode="max-autotune"), no_triton)
    assert config.mode == "off" and "Triton" in reason


def test_resolve_compile_keeps_what_can_run():
    cfg = CompileConfig(mode="max-autotune", scope="regional")
    assert resolve_compile(cfg, _env(compiler="g++"))[0] == cfg
    assert resolve_compile(CompileConfig(mode="off"), _env(compiler="g++"))[0].mode == "off"


def test_resolve_compile_turns_reduce_overhead_to_default_off_cuda():
    config, reason = resolve_compile(CompileConfig(mode="reduce-overhead"), _env(compiler="g++"))
    assert config.mode == "default" and "CUDA graphs" in reason
    cuda = _env(device="cuda", triton=True)
    assert resolve_compile(CompileConfig(mode="reduce-overhead"), cuda)[0].mode == "reduce-overhead"


# -------------------------------------------------------- the modes tune tries (its lever)

LONG_RUN = dict(planned_steps=100_000, step_ms=100.0)  # 10,000 s of steps: a tenth repays 1,000 s
"""A run whose steps could repay minutes of compile."""


def _modes(ctx: TuneContext, propose=None) -> list[str]:
    lever = TECHNIQUE.levers[0] if propose is None else dataclasses.replace(TECHNIQUE.levers[0], proposer=propose)
    return [change["compile.mode"] for change in lever.propose({}, ctx)]


def _old_propose(incumbent, ctx):
    # The broken twin, as the lever was: every GPU mode on every CUDA run.
    modes = ("default", *GPU_MODES) if ctx.device == "cuda" else ("default",)
    return [Overlay.of(CompileConfig, mode=mode) for mode in modes] if ctx.own(CompileTuning).can_compile else []


@pytest.mark.parametrize("ctx", [
    TuneContext(device="cuda", budget_s=150.0, **LONG_RUN),  # the compile would eat the budget
    TuneContext(device="cuda", budget_s=3600.0, planned_steps=2_000, step_ms=100.0),  # 200 s of steps
    TuneContext(device="cuda", budget_s=3600.0, step_ms=100.0),  # the run's length unknown
    TuneContext(device="cuda", **LONG_RUN),  # the budget unknown
], ids=["150 s budget", "short run", "unknown run", "unknown budget"])
def test_max_autotune_is_not_proposed_where_its_compile_cannot_be_repaid(ctx):
    assert _modes(ctx) == ["default", "reduce-overhead"]
    assert autotune_refusal(ctx)
    assert "max-autotune" in _modes(ctx, _old_propose)  # the twin: the old lever proposed it all the same


def test_max_autotune_is_proposed_for_a_long_run_with_a_large_budget():
    ctx = TuneContext(device="cuda", budget_s=1200.0, **LONG_RUN)
    assert autotune_refusal(ctx) is None
    assert _modes(ctx) == ["default", "reduce-overhead", "max-autotune"]


def test_a_measured_compile_sets_max_autotune_s_expected_compile():
    measured = {"compile": CompileFacts(compile_s=40.0, cache_misses=3)}  # 5 x 40 s = 200 s expected
    assert autotune_compile_s(TuneContext(techniques=measured))[0] == 200.0
    assert "max-autotune" not in _modes(TuneContext(device="cuda", budget_s=600.0, techniques=measured, **LONG_RUN))
    assert "max-autotune" in _modes(TuneContext(device="cuda", budget_s=1000.0, techniques=measured, **LONG_RUN))
    warm = {"compile": CompileFacts(compile_s=2.0, cache_hits=3)}  # loaded from the cache: not a compile's cost
    assert autotune_compile_s(TuneContext(techniques=warm))[0] == AUTOTUNE_MIN_COMPILE_S


def test_nothing_gpu_only_is_proposed_on_a_cpu_and_nothing_where_compile_cannot_run():
    assert _modes(TuneContext(device="cpu", budget_s=3600.0, **LONG_RUN)) == ["default"]
    cannot = (CompileTuning(can_compile=False),)
    assert _modes(TuneContext(device="cuda", budget_s=3600.0, tuning=cannot, **LONG_RUN)) == []
