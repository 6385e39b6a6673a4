"""Every finding's fix is a setting, rendered by the technique's own spelling, never text.

One triggering Facts per rule in ``RULES`` (a technique's rule may bring its own, as
``Rule.example``; the rest are here): the
finding's ``torchboost.toml`` lines parse and give back the very Overlay it carries, its
plain-PyTorch lines are its techniques' spellings (then the script change, if any), and
no module in ``diagnose/`` or ``techniques/`` writes a fix as a string.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import torchboost
from _diagnose_helpers import GIB, checkpointed, make_facts, printing, profile, steps, with_
from torchboost.frameworks import fix_toml, fix_torch
from torchboost.config import Overlay
from torchboost.diagnose import Facts, StepRecord
from torchboost.diagnose.gpu import GpuFacts
from torchboost.evidence.evaluation_facts import EvaluationFacts
from torchboost.evidence.host_lines import HostLine
from torchboost.evidence.host_side import HostFacts
from torchboost.diagnose.rules import RULES
from torchboost.frameworks import spell
from torchboost.techniques.registry import techniques

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA_BOUND = dict(data=60.0, forward=20.0, backward=15.0, optimizer=3.0, other=2.0)
CONV = {"has_conv2d": True, "channels_last": False}


def _epochs() -> list[StepRecord]:
    recs = steps(12)
    for rec in recs[::5]:  # the first batch of each 5-batch epoch waits for the workers to start
        rec.data_ms += 300.0
        rec.total_ms += 300.0
    return recs


def _gpu(data_ms: float = 0.0, **gpu) -> Facts:
    base = GpuFacts(span_ms=100.0, busy_pct=60.0, idle_pct=40.0, compute_pct=50.0, non_compute_pct=10.0,
                    kernels=1000, small_kernel_pct=20.0, steps=4).to_dict()
    return Facts(env={"device": "cuda"}, steps=[StepRecord(i, 25.0, data_ms=data_ms) for i in range(4)],
                 gpu={**base, **gpu})


def _lines(code: str, callee: str = "", device: str = "cpu") -> Facts:
    """Steps of 100 ms, 60 of them at one line of the script outside the loop's phases."""
    facts = make_facts(device, forward=20.0, backward=15.0, optimizer=5.0, other=60.0)
    indexes = [s.index for s in facts.steps]
    facts.host = HostFacts(lines=[HostLine("other", "/home/me/train.py", 40, code, callee,
                                           {i: 60.0 * s.total_ms / 100.0 for i, s in zip(indexes, facts.steps)})],
                           line_interval_ms=2.0)
    return facts


def _evaluating() -> Facts:
    """Steps of 100 ms, every fifth one followed by a 200 ms evaluation with gradients on,
    in batches of 16 where training's are 64."""
    facts = make_facts()
    for step in facts.steps[::5]:
        step.eval_ms = 200.0
    facts.evaluation = EvaluationFacts(calls=40, grad_calls=40, batch_size=16, train_batch_size=64)
    return facts


TRIGGERS = {
    "data.workers": lambda: with_(make_facts(**DATA_BOUND), loader={"num_workers": 0}),
    "data.pin_memory": lambda: with_(make_facts("cuda", **DATA_BOUND), loader={"pin_memory": False}),
    "data.persistent_workers": lambda: with_(make_facts(), loader={"persistent_workers": False, "num_batches": 5},
                                             steps=_epochs()),
    "precision.lower": lambda: with_(make_facts(), precision={"autocast": False, "autocast_dtype": None}),
    "precision.slower_on_cpu": lambda: make_facts(cpu_bf16=False),
    "compile.enable": lambda: with_(make_facts(), model={"compiled": False}),
    "sync.host_device": lambda: with_(make_facts("cuda"), profile=profile(sync=20.0)),
    "host.checkpoint": lambda: checkpointed(),
    "host.output": lambda: printing(),
    "optimizer.fused": lambda: with_(make_facts(optimizer=20.0, forward=25.0), optimizer={"fused": None}),
    "memory.headroom": lambda: with_(make_facts("cuda"), peak_memory_bytes=10 * GIB),
    "loss.nonfinite": lambda: with_(make_facts(), losses=[2.0, float("nan")]),
    "threads.oversubscribed": lambda: with_(make_facts(cores=8), cpu_threads=8),
    "cudnn.benchmark": lambda: with_(make_facts("cuda"), model=CONV, precision={"cudnn_benchmark": False}),
    "memory.channels_last": lambda: with_(make_facts("cuda"), model=CONV),
    "gpu.idle": lambda: _gpu(data_ms=10.0),
    "gpu.syncs": lambda: _gpu(syncs=8, sync_ops={"aten::item": 8}),
    "gpu.pageable_copies": lambda: _gpu(h2d_pageable_count=8, h2d_pageable_bytes=8 << 20, memcpy_ms=10.0),
    "gpu.small_kernels": lambda: _gpu(small_kernel_pct=70.0),
    "gpu.collectives": lambda: _gpu(collective_ms=30.0, collective_overlap_pct=20.0),
    "host.sync": lambda: _lines("total += loss.item()", device="cuda"),
    "host.line": lambda: _lines("acc = slow_metric(out, y)", "metrics.slow_metric"),
    "evaluation.often": _evaluating,
    "evaluation.grad": _evaluating,
    "evaluation.batch": _evaluating,
}


def _examples() -> dict:
    """Facts that make each rule fire: the rule's own example where it declares one, else ours."""
    declared = {rule.id: rule.example for t in techniques() for rule in t.rules if rule.example is not None}
    return {**TRIGGERS, **declared}


EXAMPLES = _examples()


def test_every_rule_has_an_example_that_fires_it():
    assert set(EXAMPLES) == set(RULES)


def _settings(toml_text: str) -> Overlay:
    tables = tomllib.loads(toml_text)
    return Overlay({f"{section}.{key}": value for section, values in tables.items() for key, value in values.items()})


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_the_fix_renders_from_its_overlay_and_round_trips(rule_id):
    finding = RULES[rule_id](EXAMPLES[rule_id]())
    assert finding is not None and finding.id == rule_id
    assert _settings(fix_toml(finding)) == finding.fix  # the TOML says exactly the settings it carries
    torch_lines = fix_torch(finding).splitlines()
    spelled = [line for code in spell(finding.fix).torch_code for line in code.splitlines()]
    assert torch_lines[:len(spelled)] == spelled  # the technique's own plain-PyTorch spelling, first
    assert finding.fix or finding.advice  # a fix says what to change, as a setting or in the script
    assert fix_torch(finding).strip()
    if not finding.fix:
        assert fix_toml(finding).startswith("# no torchboost.toml key:")


def test_the_rendered_fix_is_in_the_finding_s_json_and_comes_back():
    finding = RULES["data.workers"](TRIGGERS["data.workers"]())
    data = finding.to_dict()
    assert data["fix"] == {"loader.num_workers": 2} and "fix_toml" not in data  # spelled by frameworks, not stored
    assert type(finding).from_dict(data) == finding


# -- no fix is written as a string in the rules ------------------------------------------------

_FIX_TEXT = ("fix_toml", "fix_torch")


def _fix_strings(tree: ast.AST) -> list[str]:
    """Keyword arguments or assignments that write a fix as text."""
    found = [node.arg for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg in _FIX_TEXT]
    found += [t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name) and t.id in _FIX_TEXT]
    return found


def test_no_rule_writes_its_fix_as_text():
    src = Path(torchboost.__file__).parent
    paths = [*sorted((src / "diagnose").glob("*.py")), *sorted((src / "techniques").glob("*.py"))]
    assert len(paths) > 10
    assert {str(p.relative_to(src)): found for p in paths if (found := _fix_strings(ast.parse(p.read_text())))} == {}


def test_the_check_finds_a_fix_written_as_text():
    broken = 'fix_toml = "[loader]\\nnum_workers = 2"\nFinding(id="x", fix_torch="DataLoader(..., num_workers=2)")\n'
    assert sorted(_fix_strings(ast.parse(broken))) == ["fix_toml", "fix_torch"]
