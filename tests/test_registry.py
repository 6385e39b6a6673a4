"""The technique registry and the typed settings that travel between the stages.

Overlay: validated against the sections, combined with |, applied with on(), dotted names
only at its edges. The registry: every technique found by itself, in application order,
each section owned once; framework spellings ready for the export.
"""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from torchboost import BoostConfig, ConfigError, Overlay
from torchboost.config import register_section, section_classes
from torchboost.techniques.accumulation import AccumulationConfig
from torchboost.techniques.cpu import CpuConfig
from torchboost.techniques.loader import LoaderConfig
from torchboost.techniques.precision import PrecisionConfig
from torchboost.techniques.registry import Parity, techniques
from torchboost.tune.search.levers import default_levers


def test_overlay_is_built_from_sections_and_validated():
    o = Overlay.of(LoaderConfig, num_workers=2) | Overlay.of(CpuConfig, threads=1)
    assert o.to_dict() == {"cpu.threads": 1, "loader.num_workers": 2}
    assert o.value(LoaderConfig, "num_workers") == 2 and o.value(LoaderConfig, "pin_memory") is None
    assert o.section(CpuConfig) == {"threads": 1}
    with pytest.raises(ConfigError, match="loader.num_workers: expected"):
        Overlay.of(LoaderConfig, num_workers=-1)
    with pytest.raises(ConfigError, match='did you mean "loader.num_workers"'):
        Overlay.of(LoaderConfig, num_worker=2)
    with pytest.raises(ConfigError, match="unknown section"):
        Overlay({"loaderr.num_workers": 2})
    with pytest.raises(ConfigError, match='expected "section.key"'):
        Overlay({"threads": 2})


def test_overlay_combines_right_side_wins_and_is_immutable():
    a = Overlay.of(PrecisionConfig, mode="bf16") | Overlay.of(CpuConfig, threads=2)
    b = a | Overlay.of(CpuConfig, threads=1)
    assert a["cpu.threads"] == 2 and b["cpu.threads"] == 1
    assert b == {"cpu.threads": 1, "precision.mode": "bf16"}  # compares as a mapping
    assert hash(b) == hash(Overlay(b.to_dict()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.extra = 1
    assert pickle.loads(pickle.dumps(b)) == b
    assert Overlay().describe() == "baseline" and b.describe() == "cpu.threads=1, precision.mode=bf16"
    assert b.without(CpuConfig) == Overlay.of(PrecisionConfig, mode="bf16")


def test_overlay_on_a_config_and_between_two():
    base = BoostConfig.off()
    tuned = (Overlay.of(AccumulationConfig, steps=4) | Overlay.of(PrecisionConfig, mode="bf16")).on(base)
    assert tuned.accumulation.steps == 4 and tuned.precision.mode == "bf16"
    assert tuned.loader == base.loader  # the rest stays as it was
    assert Overlay.between(base, tuned) == {"accumulation.steps": 4, "precision.mode": "bf16"}
    assert Overlay.between(base, base) == Overlay()


def test_boostconfig_is_frozen_comparable_and_picklable():
    cfg = BoostConfig().replace(cpu={"threads": 3})
    assert cfg == pickle.loads(pickle.dumps(cfg)) and cfg != BoostConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cpu = CpuConfig()
    with pytest.raises(ConfigError, match="cpu: expected a CpuConfig"):
        BoostConfig(cpu=LoaderConfig())
    with pytest.raises(AttributeError):
        cfg.nonexistent  # noqa: B018


def test_a_section_must_be_a_frozen_dataclass_with_a_name_and_an_order():
    class Loose:
        section = "loose"
        order = 1

    with pytest.raises(TypeError, match="frozen dataclass"):
        register_section(Loose)

    @dataclasses.dataclass(frozen=True)
    class Nameless:
        x: int = 0

    with pytest.raises(TypeError, match="section"):
        register_section(Nameless)
    assert "loose" not in section_classes()


def test_every_technique_is_found_in_application_order():
    registry = techniques()
    names = [t.name for t in registry]
    assert len(names) == len(set(names))
    assert [t.order for t in registry] == sorted(t.order for t in registry)
    # what the order must guarantee, written in each module: process-wide switches first,
    # channels_last before compile, compile before the DDP wrap, the loader before the
    # accumulation window, the optimizer last
    position = {name: i for i, name in enumerate(names)}
    assert position["cpu"] < position["memory"] < position["compile"] < position["distributed"]
    assert position["distributed"] < position["loader"] < position["accumulation"] < position["optimizer"]
    owned = [t.section.section for t in registry if t.section is not None]
    assert sorted(owned) == sorted(section_classes())


def test_levers_come_from_the_registry_with_a_parity_kind():
    levers = default_levers()
    ids = [lever.id for lever in levers]
    assert ids[:3] == ["host", "sharing", "precision"]  # the default order of old
    assert {"host", "precision", "tf32", "compile", "optimizer", "channels_last", "cudnn"} <= set(ids)
    assert all(isinstance(lever.parity, Parity) for lever in levers)
    by_technique = {t.name: {lv.id for lv in t.levers} for t in techniques()}
    assert by_technique["accumulation"] == set()  # the tuner never changes what is trained


def test_framework_spellings():
    spell = {t.name: t.spell for t in techniques() if t.spell is not None}
    assert spell["precision"](PrecisionConfig(mode="bf16")).lightning == {"precision": "bf16-mixed"}
    assert spell["precision"](PrecisionConfig(mode="fp16")).accelerate == {"mixed_precision": "fp16"}
    assert spell["accumulation"](AccumulationConfig(steps=4)).lightning == {"accumulate_grad_batches": 4}
    assert spell["cpu"](CpuConfig(threads=2)).code == ("torch.set_num_threads(2)",)
    assert spell["cpu"](CpuConfig(threads="keep")).code == ()


def _proposals(ctx) -> dict[str, list[dict]]:
    from torchboost.config import Overlay
    from torchboost.tune.search.levers import default_levers

    return {lever.id: [c.to_dict() for c in lever.propose(Overlay(), ctx)] for lever in default_levers()}


def test_gpu_candidates_are_proposed_on_cuda_and_inert_on_a_cpu():
    from torchboost.techniques.memory import MemoryTuning
    from torchboost.techniques.precision import PrecisionTuning
    from torchboost.techniques.registry import TuneContext

    cuda = _proposals(TuneContext(device="cuda", uses_booster=True, budget_s=1200.0, planned_steps=100_000,
                                  step_ms=100.0,  # max-autotune can repay
                                  tuning=(PrecisionTuning(cuda_bf16=True, tf32=True), MemoryTuning(has_conv2d=True))))
    assert [c["compile.mode"] for c in cuda["compile"]] == ["default", "reduce-overhead", "max-autotune"]
    assert cuda["precision"] == [{"precision.mode": "bf16"}] and cuda["tf32"] == [{"fp32_math.mode": "tf32"}]
    assert cuda["pin_memory"] == [{"loader.pin_memory": True}] and cuda["cudnn"]
    assert cuda["channels_last"] == [{"memory.channels_last": True}]
    assert {"optimizer.implementation": "fused"} in cuda["optimizer"]
    older = _proposals(TuneContext(device="cuda", uses_booster=True, tuning=(PrecisionTuning(cuda_bf16=False),)))
    assert older["precision"] == [{"precision.mode": "fp16"}]  # pre-Ampere: fp16 with its scaler, via the Booster
    cpu = _proposals(TuneContext(device="cpu", uses_booster=True))
    assert [c["compile.mode"] for c in cpu["compile"]] == ["default"]
    assert not cpu["pin_memory"] and not cpu["cudnn"] and not cpu["tf32"]


def test_the_order_is_written_once_with_its_reasons_and_the_file_follows_it():
    from torchboost.techniques.registry import application_order

    order = application_order()
    assert [name for name, _ in order] == [t.name for t in techniques()]
    assert all(why for _, why in order)  # each position says why
    with_sections = [t.section.section for t in techniques() if t.section is not None]
    assert list(section_classes()) == with_sections
    text = BoostConfig().to_toml_string()
    assert [text.index(f"[{name}]") for name in with_sections] == sorted(text.index(f"[{n}]") for n in with_sections)


def test_the_order_is_derived_from_after_and_before_and_refuses_a_cycle():
    from torchboost.techniques.registry import Technique, _ordered

    a, b = Technique("a", "A"), Technique("b", "B", after=("a",))
    newcomer = Technique("z", "Z", after=("a",), before=("b",))  # must come before b, which it does not edit
    assert [t.name for t in _ordered([b, a, newcomer])] == ["a", "z", "b"]
    assert [t.order for t in _ordered([b, a])] == [1, 2]
    with pytest.raises(RuntimeError, match="cycle"):
        _ordered([Technique("a", "A", after=("b",)), Technique("b", "B", after=("a",))])
    with pytest.raises(RuntimeError, match="unknown"):
        _ordered([Technique("a", "A", after=("nothing",))])
