"""The bound on hand-made facts when neither compute nor memory holds the step: collectives
no op hides (communication) and a phase of the script's own Python, each with its twin."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from torchboost.diagnose.headroom import headroom_of
from torchboost.diagnose.held import duration, python_line, python_phase
from torchboost.diagnose.rules import diagnose
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.observed import Facts, ModelFacts, OptimizerFacts, ProfileFacts, StepRecord
from torchboost.evidence.rulekit import collectives, view
from torchboost.limits.machine import MachineLimits, MatmulRate

LIMITS = MachineLimits(key="k", device="cpu", name="Example CPU", threads=2,
                       matmul=[MatmulRate("fp32", 2048, 5.0e10), MatmulRate("bf16", 2048, 1.0e11)])
MATMULS = [{"name": "aten::mm", "self_cpu_ms": 9.0, "self_device_ms": 0.0, "calls": 4},
           {"name": "aten::add_", "self_cpu_ms": 1.0, "self_device_ms": 0.0, "calls": 4}]


def _phases(**walls_and_ops) -> dict:
    """{"forward": (wall, ops, collective)...} -> ProfileFacts.phases, the step their sum."""
    phases = {name: {"wall_ms": w, "op_ms": o, "collective_ms": c} for name, (w, o, c) in walls_and_ops.items()}
    phases["step"] = {k: sum(p[k] for p in phases.values()) for k in ("wall_ms", "op_ms", "collective_ms")}
    return phases


def _ddp_step(collective_ms: float, overlap_pct: float) -> Facts:
    """Reported: a 49 ms DDP step (forward 3, backward 44, optimizer 2) whose backward waits
    for an all-reduce of ``collective_ms``, ``overlap_pct`` of it beside the backward's ops."""
    exposed = collective_ms * (1 - overlap_pct / 100)
    steps = [StepRecord(i, 49.0, forward_ms=3.0, backward_ms=44.0, optimizer_ms=2.0) for i in range(6)]
    profile = ProfileFacts(steps=2, top_ops=MATMULS, collective_ms_per_step=collective_ms,
                           collective_overlap_pct=overlap_pct,
                           phases=_phases(forward=(3.0, 2.9, 0.0), backward=(44.0, 44.0 - exposed, exposed),
                                          optimizer=(2.0, 2.0, 0.0)))
    return Facts(steps=steps, flops_per_step=int(5e7), flops_by_op={"aten.mm": int(5e7)}, profile=profile,
                 world_size=2, model=ModelFacts(param_dtypes=["torch.float32"]),
                 optimizer=OptimizerFacts(class_name="SGD", fused=None, supports_fused=True))


def test_a_step_its_all_reduce_holds_is_bound_by_communication():
    h = headroom_of(_ddp_step(collective_ms=42.0, overlap_pct=2.0), LIMITS)
    assert h.bound == "communication"
    assert h.why.startswith("collectives hold 84% of the step: 41.2 ms of its 49.0 ms with no compute beside them")
    assert "but compute does not hold it. Bound: communication (collectives hold 84%" in h.line
    assert "left in" not in h.line  # no compute headroom offered for a step compute does not hold


@pytest.mark.parametrize("collective_ms, overlap_pct", [(42.0, 90.0), (8.0, 0.0)])
def test_twin_collectives_overlapped_or_small_do_not_bound_the_step(collective_ms, overlap_pct):
    h = headroom_of(_ddp_step(collective_ms, overlap_pct), LIMITS)
    assert h.bound == "compute" and "collectives" not in h.why


def test_facts_of_an_older_writer_give_the_collectives_from_their_overlap():
    facts = _ddp_step(collective_ms=42.0, overlap_pct=2.0)
    facts.profile.phases = {}
    found = collectives(facts)
    assert found.exposed_ms == pytest.approx(41.16) and found.step_ms == pytest.approx(49.0)
    assert found.in_compute_ms == pytest.approx(41.16)
    assert headroom_of(facts, LIMITS).bound == "communication"


def test_the_wait_for_collectives_is_no_compute_share():
    # precision and compile speed the backward's ops up, not its wait for the all-reduce
    assert view(_ddp_step(42.0, 2.0)).compute_share == pytest.approx(47 / 49 - 41.16 / 49)
    assert view(_ddp_step(42.0, 90.0)).compute_share == pytest.approx(47 / 49 - 4.2 / 49)


def _python_forward(forward_ops_ms: float, host: HostFacts | None = None) -> Facts:
    """Reported: an 8 s forward of pure Python, a 60 ms backward and a 40 ms optimizer step;
    the profiler saw ``forward_ops_ms`` of ops in the forward."""
    steps = [StepRecord(i, 8100.0, forward_ms=8000.0, backward_ms=60.0, optimizer_ms=40.0) for i in range(4)]
    profile = ProfileFacts(steps=2, top_ops=[{"name": "aten::add", "self_cpu_ms": 2.0, "self_device_ms": 0.0,
                                              "calls": 4}],
                           phases=_phases(forward=(8200.0, forward_ops_ms, 0.0), backward=(61.0, 60.0, 0.0),
                                          optimizer=(41.0, 40.0, 0.0)))
    return Facts(steps=steps, flops_per_step=int(1e6), flops_by_op={"aten.mm": int(1e6)}, profile=profile,
                 model=ModelFacts(param_dtypes=["torch.float32"]), host=host)


def test_a_forward_of_python_bounds_the_step_by_python_and_draws_no_roofline():
    h = headroom_of(_python_forward(forward_ops_ms=1.0), LIMITS)
    assert h.bound == "python" and h.ops == ()
    assert h.why == "the forward's ops take 1.0 ms of its 8.2 s: the rest, 99% of the step, is the script's own Python"
    assert "Bound: Python (the forward's ops take 1.0 ms" in h.line and "memory" not in h.line


def test_twin_a_forward_its_ops_fill_is_not_python():
    h = headroom_of(_python_forward(forward_ops_ms=8100.0), LIMITS)
    assert h.bound == "memory" and h.ops  # its one op moves bytes: the op table speaks for the step


def test_a_python_forward_leaves_no_compute_share_for_precision_to_speed():
    assert view(_python_forward(1.0)).compute_share < 0.05
    assert view(_python_forward(8100.0)).compute_share == pytest.approx(8060 / 8100)  # the twin: all ops
    assert "precision.lower" not in {f.id for f in diagnose(_python_forward(1.0))}


def _sampled(bucket: str, where: int, ms: float) -> SimpleNamespace:
    return SimpleNamespace(bucket=bucket, file="/home/me/model.py", line=where, code=f"line {where}", callee="",
                           ms_by_step={0: ms, 1: ms})


def test_the_hook_names_the_line_that_holds_the_phase_where_the_facts_sampled_it():
    host = HostFacts()
    host.lines = [_sampled("forward", 14, 7000.0), _sampled("forward", 9, 900.0), _sampled("other", 3, 9000.0)]
    facts = _python_forward(1.0, host)
    assert python_line(facts, "forward") == "model.py:14 (`line 14`)"
    assert headroom_of(facts, LIMITS).why.endswith("is the script's own Python, most of it at model.py:14 (`line 14`)")
    assert python_line(facts, "backward") is None  # no line sampled there


def test_twin_without_sampled_lines_the_hook_says_nothing():
    assert python_line(_python_forward(1.0), "forward") is None
    assert python_line(_python_forward(1.0, HostFacts()), "forward") is None


def test_python_outside_a_phase_larger_than_any_phase_s_is_the_host_s():
    facts = _python_forward(1.0)
    for step in facts.steps:  # 12 s between the phases against 8 s of forward Python
        step.total_ms += 12000.0
    assert python_phase(facts).step_pct < 60
    assert headroom_of(facts, LIMITS).bound == "host"


def test_durations_read_in_seconds_from_one():
    assert (duration(8200.0), duration(41.16), duration(0.04)) == ("8.2 s", "41.2 ms", "0.04 ms")
