"""Apple's MPS (faked): the environment's bf16 and compile answers, and what precision's and
compile's "auto", quick switch and tune levers make of them, each with its twin."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchboost.techniques.precision as prec
from torchboost import env
from torchboost.config import ConfigError
from torchboost.env import Environment
from torchboost.techniques.compile import TECHNIQUE as COMPILE, CompileConfig, resolve_compile
from torchboost.techniques.compile.compile_candidates import compile_tune_context
from torchboost.techniques.precision import TECHNIQUE as PRECISION, resolve_precision
from torchboost.techniques.precision.precision_diagnosis import tune_context
from torchboost.evidence.observed import Facts
from torchboost.techniques.registry import ProbeContext, TuneContext


def _mps(**overrides) -> Environment:
    base = dict(device="mps", torch_version=torch.__version__, cpu_cores=8, ram_bytes=16 << 30,
                ram_available_bytes=8 << 30, compiler="/usr/bin/clang++")
    return Environment(**{**base, **overrides})


@pytest.fixture
def fresh_probe():
    env.probe.cache_clear()
    yield env.probe
    env.probe.cache_clear()


# -- the environment ------------------------------------------------------------------------

def test_mps_bf16_is_macos_14_and_a_bf16_op_that_runs(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: (major, minor) <= (14, 0))
    assert env._mps_bf16(lambda: True)


def test_twin_no_mps_bf16_before_macos_14_or_where_the_op_is_refused(monkeypatch):
    tried = []
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: (major, minor) <= (13, 5))
    assert not env._mps_bf16(lambda: tried.append(1) or True) and not tried  # the op is not even tried

    def refused():
        raise RuntimeError("MPS BFloat16 is only supported on MacOS 14 or newer")

    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: True)
    assert not env._mps_bf16(refused)


def test_mps_inductor_is_the_metal_backend_and_a_shader_that_compiles(monkeypatch):
    shaders = []
    monkeypatch.setattr(torch.mps, "compile_shader", shaders.append)
    assert env._mps_inductor() and "kernel void" in shaders[0]


def test_twin_no_mps_inductor_where_no_shader_compiles_or_torch_has_no_metal_backend(monkeypatch):
    def refused(source):
        raise RuntimeError("MPS is not available")

    monkeypatch.setattr(torch.mps, "compile_shader", refused)
    assert not env._mps_inductor()
    monkeypatch.setattr(torch.mps, "compile_shader", lambda source: None)
    monkeypatch.setattr(env.importlib.util, "find_spec", lambda name: None)  # a torch before 2.6
    assert not env._mps_inductor()


def test_a_fake_mps_probes_bf16_and_compile(monkeypatch, fresh_probe):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(env, "_mps_bf16", lambda: True)
    monkeypatch.setattr(env, "_mps_inductor", lambda: True)
    here = fresh_probe()
    assert (here.device, here.mps_bf16, here.bf16, here.can_compile) == ("mps", True, True, True)
    assert "Metal backend" in here.compile_reason
    assert here.to_dict()["mps_bf16"] is True and here.to_dict()["can_compile"] is True


def test_twin_off_mps_nothing_is_tried_on_it(monkeypatch, fresh_probe):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)

    def never():
        raise AssertionError("an MPS probe ran off MPS")

    monkeypatch.setattr(env, "_mps_bf16", never)
    monkeypatch.setattr(env, "_mps_inductor", never)
    here = fresh_probe()
    assert (here.device, here.mps_bf16, here.mps_inductor) == ("cpu", False, False)


def test_compile_on_mps_asks_the_metal_backend_not_the_cpu_compiler():
    assert _mps(mps_inductor=True).can_compile
    assert not _mps(mps_inductor=False).can_compile  # the twin: a C++ compiler is there, no Metal backend
    assert "no Inductor backend for MPS" in _mps().compile_reason


# -- precision's "auto" -----------------------------------------------------------------------

def test_auto_on_mps_with_bf16_is_bf16_with_its_reason():
    mode, reason = resolve_precision("auto", _mps(mps_bf16=True))
    assert mode == "bf16" and "MPS supports bf16" in reason and "not measured" in reason


def test_twin_auto_on_mps_without_bf16_keeps_fp32():
    mode, reason = resolve_precision("auto", _mps(mps_bf16=False))
    assert mode == "fp32" and "macOS 14" in reason


def test_bf16_asked_on_mps_without_it_says_what_to_use():
    with pytest.raises(ConfigError, match='"bf16" is not supported by Apple\'s MPS.*use "fp16" or "auto"'):
        resolve_precision("bf16", _mps(mps_bf16=False))
    assert resolve_precision("bf16", _mps(mps_bf16=True)) == ("bf16", "requested")


# -- compile's choice -------------------------------------------------------------------------

def test_compile_asked_on_mps_runs_where_the_metal_backend_is():
    chosen, reason = resolve_compile(CompileConfig(mode="default"), _mps(mps_inductor=True))
    assert chosen.mode == "default" and "Metal backend" in reason
    chosen, reason = resolve_compile(CompileConfig(mode="reduce-overhead"), _mps(mps_inductor=True))
    assert chosen.mode == "default"  # CUDA graphs are CUDA's


def test_twin_compile_on_mps_without_the_metal_backend_is_off():
    chosen, reason = resolve_compile(CompileConfig(mode="default"), _mps(mps_inductor=False))
    assert chosen.mode == "off" and "no Inductor backend for MPS" in reason


# -- the doctor's quick switch and tune's levers ---------------------------------------------------

def _switch(monkeypatch, mps_bf16: bool):
    monkeypatch.setattr(env, "probe", lambda: _mps(mps_bf16=mps_bf16))
    return prec.quick_switch(ProbeContext(model=nn.Linear(4, 4), optimizer=None, loader=None, device="mps"))


def test_the_doctor_times_bf16_autocast_on_mps_with_bf16(monkeypatch):
    switch = _switch(monkeypatch, True)
    assert switch is not None and switch.finding_id == "precision.lower" and dict(switch.setting) == {"precision.mode": "bf16"}


def test_twin_no_switch_on_mps_without_bf16(monkeypatch):
    assert _switch(monkeypatch, False) is None


def _proposed(technique, facts: Facts) -> list[dict]:
    ctx = TuneContext(device="mps", budget_s=600.0, tuning=(tune_context(facts), compile_tune_context(facts)))
    return [dict(change) for lever in technique.levers for change in lever.propose({}, ctx)]


def test_tune_tries_bf16_and_compile_on_mps_with_them():
    facts = Facts(env=_mps(mps_bf16=True, mps_inductor=True).to_dict())
    assert _proposed(PRECISION, facts) == [{"precision.mode": "bf16"}]
    assert _proposed(COMPILE, facts) == [{"compile.mode": "default"}]


def test_twin_tune_tries_neither_on_mps_without_them():
    facts = Facts(env=_mps().to_dict())
    assert _proposed(PRECISION, facts) == [] and _proposed(COMPILE, facts) == []
