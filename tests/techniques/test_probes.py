"""Each technique reads its own facts from the live objects, and they travel in Facts.

The observer knows no technique: it hands every probe the same ProbeContext and stores
what each returns under the technique's name; the rules read it back with ``seen``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from torchboost.evidence.observed import Facts
from torchboost.observe.probes import describe
from torchboost.observe.probes.describe import describe_model, probe_techniques
from torchboost.techniques.cudnn import CudnnFacts
from torchboost.techniques.memory import MemoryFacts
from torchboost.techniques.precision.precision_diagnosis import PrecisionFacts
from torchboost.techniques.registry import ProbeContext, techniques

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _tf32_helpers import HAS_NEW_API, script_used_the_new_api, torch_switches  # noqa: E402,F401


def _context(model: nn.Module, **kwargs) -> ProbeContext:
    return ProbeContext(model=model, optimizer=None, loader=None, device="cpu", **kwargs)


def _conv() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3))


def test_every_technique_with_facts_has_a_probe_and_a_name_for_them():
    with_facts = [t for t in techniques() if t.facts is not None]
    assert {t.name for t in with_facts} >= {"precision", "memory", "cudnn", "compile"}
    for technique in with_facts:  # read from the live objects, or from what the process kept
        assert (technique.probe or technique.observe) is not None and technique.facts.technique == technique.name


def test_probes_read_the_script_s_own_choices():
    plain = probe_techniques(_context(_conv()))
    assert plain["memory"] == MemoryFacts(channels_last=False) and plain["precision"].autocast is False
    assert probe_techniques(_context(_conv().to(memory_format=torch.channels_last)))["memory"].channels_last
    seen = probe_techniques(_context(_conv(), autocast_dtype="bfloat16", grad_scaler=True))["precision"]
    assert seen == PrecisionFacts(autocast=True, autocast_dtype="bfloat16", grad_scaler=True, tf32_matmul=False)


def test_the_cudnn_probe_reads_torch_s_switch():
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        assert probe_techniques(_context(_conv()))["cudnn"] == CudnnFacts(cudnn_benchmark=True)
    finally:
        torch.backends.cudnn.benchmark = before


def test_technique_facts_round_trip_through_json_as_their_classes():
    model = _conv().to(memory_format=torch.channels_last)
    facts = Facts(model=describe_model(model), techniques=probe_techniques(_context(model, autocast_dtype="bfloat16")))
    data = json.loads(json.dumps(facts.to_dict()))
    assert data["memory"] == {"channels_last": True}  # under the technique's own name
    back = Facts.from_dict(data)
    assert back == facts and isinstance(back.techniques["memory"], MemoryFacts)
    assert back.seen(MemoryFacts).channels_last and back.precision.autocast_dtype == "bfloat16"
    assert Facts().seen(PrecisionFacts) == PrecisionFacts() == Facts().precision  # not observed: the defaults


def test_a_compiled_model_is_described_as_compiled():
    # the script's own compile (the lazy wrapper: nothing compiles until it is called)
    assert describe_model(torch.compile(_conv())).compiled and not describe_model(_conv()).compiled


@pytest.mark.skipif(not HAS_NEW_API, reason="this torch has no per-library fp32_precision switches")
def test_a_script_that_set_tf32_through_the_new_api_keeps_every_technique_s_facts(torch_switches):
    script_used_the_new_api()  # torch's older TF32 flags now raise when read
    errors: list[str] = []
    found = probe_techniques(_context(_conv()), errors)
    assert errors == [] and found["precision"].tf32_matmul and found["memory"] == MemoryFacts(channels_last=False)


def _failing(name: str):
    def probe(ctx):
        raise RuntimeError("boom")
    return [dataclasses.replace(t, probe=probe) if t.name == name else t for t in techniques()]


def test_one_probe_that_raises_leaves_the_other_techniques_facts_and_says_why(monkeypatch):
    monkeypatch.setattr(describe, "techniques", lambda: _failing("precision"))
    errors: list[str] = []
    found = probe_techniques(_context(_conv()), errors)
    assert "precision" not in found and found["memory"] == MemoryFacts(channels_last=False)
    assert errors == ["probe of precision: RuntimeError: boom"]


def test_twin_without_a_list_for_the_notes_the_failure_is_raised(monkeypatch):
    monkeypatch.setattr(describe, "techniques", lambda: _failing("precision"))
    with pytest.raises(RuntimeError, match="boom"):
        probe_techniques(_context(_conv()))
