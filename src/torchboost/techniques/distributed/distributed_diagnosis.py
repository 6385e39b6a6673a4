"""The doctor's findings for a step its collectives hold: what cuts DDP's all-reduce.

Each reads the profiler window's collectives (:func:`~torchboost.evidence.rulekit.collectives`:
their time with no op of the training thread beside them, a share of the step) and the
wrapper's settings (:class:`~torchboost.techniques.distributed.distributed_facts.DdpFacts`):

* ``distributed.no_sync``: all-reduce once per accumulation window, not per batch
  (``model.no_sync()`` around all but the window's last backward);
* ``distributed.bucket_cap``: smaller buckets, so the all-reduce starts during the backward;
* ``distributed.find_unused``: ``find_unused_parameters=False`` where every parameter gets
  its gradient (DDP then stops searching the graph after every forward);
* ``distributed.static_graph``: ``static_graph=True`` where some do not, every step alike.

Only accumulation has a ``torchboost.toml`` key (``[accumulation] steps``, through the
Booster, which runs each window's other micro-steps under ``no_sync``); DDP's own settings
are the script's, said in its own words: plain DDP, or the framework's that builds it.
"""

from __future__ import annotations

import math

from torchboost.config import Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import collectives, r, view
from torchboost.techniques.accumulation import AccumulationConfig
from torchboost.techniques.distributed.distributed_facts import DdpFacts

__all__ = ["RECOVERABLE", "bucket_cap", "ddp_words", "find_unused", "no_sync", "static_graph"]

RECOVERABLE = 0.5
"""Share of the time a change could hide or remove that it is assumed to give back."""
_WINDOWS = (2, 4, 8)
"""Accumulation windows the no_sync finding chooses among (batches per all-reduce)."""
_WINDOW_SHARE = 0.2
"""The collectives' share of a batch's time under which a window is long enough."""
_MIB = 2**20


def ddp_words(facts: Facts, **settings: object) -> str:
    """DDP's ``settings`` in the script's words: the framework's that builds its DDP
    (TrainingArguments, Lightning's DDPStrategy, Accelerate's kwargs handler), else plain DDP."""
    def args(prefix: str = "") -> str:
        return ", ".join(f"{prefix}{key}={value!r}" for key, value in settings.items())
    if "transformers" in facts.frameworks:
        return f"args = TrainingArguments(..., {args('ddp_')})"
    if "lightning" in facts.frameworks:
        return f"trainer = Trainer(strategy=DDPStrategy({args()}))  # from lightning.pytorch.strategies"
    if "accelerate" in facts.frameworks:
        return f"accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs({args()})])"
    return f"model = DistributedDataParallel(model, {args()})"


def _allreduce_calls(facts: Facts) -> float | None:
    """All-reduce calls per step in the profiler window; None when the op table lacks them."""
    profile = facts.profile
    calls = [op["calls"] for op in (profile.top_ops if profile else []) if op["name"] == "c10d::allreduce_"]
    return sum(calls) / profile.steps if calls and profile.steps else None


def _window(share: float) -> int:
    """The shortest window (:data:`_WINDOWS`) under which the collectives take less than
    ``_WINDOW_SHARE`` of a batch's time, else the longest."""
    return next((k for k in _WINDOWS if (share / k) / ((1 - share) + share / k) < _WINDOW_SHARE), _WINDOWS[-1])


_NO_SYNC_CODE = """for i, (x, y) in enumerate(loader):
    last = (i + 1) % {k} == 0  # all-reduce once every {k} batches
    with contextlib.nullcontext() if last else model.no_sync():
        loss = criterion(model(x), y) / {k}
        loss.backward()
    if last:
        optimizer.step()
        optimizer.zero_grad()"""


def no_sync(facts: Facts, *, exposed_collective_pct: float = 20.0) -> Finding | None:
    """Collectives hold ``exposed_collective_pct`` percent of the step or more: under
    accumulation that all-reduces every micro-batch, ``no_sync`` on all but a window's last
    (neutral); without accumulation, windows of K batches all-reduced once (a K-times larger
    global batch: it changes what is trained, its gain per sample)."""
    found = collectives(facts)
    if found is None or 100 * found.share < exposed_collective_pct:
        return None
    c, micro = found.share, int(facts.micro_steps_per_step or 1)
    evidence = {"collective_exposed_pct": r(100 * c, 1), "collective_ms_per_step": r(found.ms),
                "collective_overlap_pct": r(found.overlap_pct, 1), "step_ms": r(found.step_ms)}
    if micro >= 2:
        calls, buckets = _allreduce_calls(facts), max(1, len(facts.seen(DdpFacts).bucket_bytes))
        if calls is None or calls < micro * buckets:
            return None  # the window all-reduces once already
        speedup = 1.0 / (1.0 - c * (1.0 - 1.0 / micro))
        return Finding(
            id="distributed.no_sync",
            title=f"Each of the {micro} accumulated micro-batches all-reduces its gradients ({calls:g} all-reduces "
                  "a step); skip all but the last with model.no_sync()",
            evidence={**evidence, "micro_steps_per_step": micro, "allreduce_calls_per_step": r(calls, 1)},
            advice="the accumulation loop is the script's: run every micro-batch but a window's last under no_sync",
            advice_code=_NO_SYNC_CODE.format(k=micro), expected_speedup=speedup,
            formula=f"1 / (1 - c x (1 - 1/K)) = 1 / (1 - {c:.3f} x (1 - 1/{micro})) = {speedup:.3f}; c = the "
                    f"collectives' exposed share of the step, K = {micro} micro-batches, one all-reduce left of K")
    k = _window(c)
    speedup = 1.0 / ((1.0 - c) + c / k)
    booster = facts.uses_booster or bool(facts.frameworks)
    return Finding(
        id="distributed.no_sync",
        title=f"The all-reduce holds {100 * c:.0f}% of the step; accumulate {k} batches under no_sync and "
              "all-reduce once",
        evidence={**evidence, "window_batches": k},
        fix=Overlay.of(AccumulationConfig, steps=k) if booster else Overlay(),
        advice=(f"accumulate {k} batches per optimizer step (the Booster runs the others under no_sync)" if booster
                else f"accumulate {k} batches per optimizer step, all but the last under model.no_sync()"),
        advice_code=_NO_SYNC_CODE.format(k=k), expected_speedup=speedup, changes_training=True, unit="sample",
        formula=f"time per sample 1 / ((1 - c) + c / K) = 1 / ({1 - c:.3f} + {c:.3f} / {k}) = {speedup:.3f}; c = the "
                f"collectives' exposed share of the step, paid once per K = {k} batches (the shortest window of "
                f"{', '.join(map(str, _WINDOWS))} where it falls under {100 * _WINDOW_SHARE:.0f}% of a batch)",
        notes=[f"The global batch grows {k}x: scale the learning rate and check the loss curve."])


def _window_step_ms(facts: Facts) -> float:
    """The profiler window's step, ms, where it marked its phases; else the recorded steps' mean."""
    step = (facts.profile.phases if facts.profile else {}).get("step", {})
    return step.get("wall_ms") or view(facts).step_ms


def bucket_cap(facts: Facts, *, exposed_collective_pct: float = 20.0, overlap_pct: float = 50.0,
               largest_param_pct: float = 50.0) -> Finding | None:
    """Collectives hold ``exposed_collective_pct`` percent of the step or more, less than
    ``overlap_pct`` percent of them overlaps the backward, and the gradients are many
    tensors (the largest under ``largest_param_pct`` percent of them): buckets a quarter
    the size are ready, and all-reduced, earlier in the backward."""
    ddp, found = facts.seen(DdpFacts), collectives(facts)
    backward = (facts.profile.phases if facts.profile else {}).get("backward", {}).get("op_ms", 0.0)
    if not ddp.ddp or found is None or not ddp.grad_bytes or backward <= 0:
        return None
    if 100 * found.share < exposed_collective_pct or found.overlap_pct >= overlap_pct:
        return None
    if 100 * ddp.largest_param_bytes / ddp.grad_bytes >= largest_param_pct:
        return None  # one tensor holds most of the gradients: no cap splits it
    cap = max(ddp.largest_param_bytes, ddp.bucket_cap_bytes // 4, _MIB)
    buckets, after = max(1, len(ddp.bucket_bytes)), math.ceil(ddp.grad_bytes / cap)
    if cap >= ddp.bucket_cap_bytes or after <= buckets:
        return None
    hideable = min(found.ms * (1 - 1 / after), backward) - found.ms * found.overlap_pct / 100
    saved = min(found.exposed_ms, RECOVERABLE * max(0.0, hideable))
    speedup = found.step_ms / (found.step_ms - saved) if found.step_ms > saved else 1.0
    if speedup < 1.01:
        return None
    cap_mb = max(1, round(cap / _MIB))
    return Finding(
        id="distributed.bucket_cap",
        title=f"The all-reduce holds {100 * found.share:.0f}% of the step and {found.overlap_pct:.0f}% of it "
              f"overlaps the backward; buckets of {cap_mb} MB start it earlier",
        evidence={"collective_exposed_pct": r(100 * found.share, 1), "collective_overlap_pct": r(found.overlap_pct, 1),
                  "collective_ms_per_step": r(found.ms), "backward_op_ms": r(backward), "buckets": buckets,
                  "bucket_cap_bytes": ddp.bucket_cap_bytes, "grad_bytes": ddp.grad_bytes},
        advice=f"DDP's buckets are the script's: bucket_cap_mb={cap_mb}",
        advice_code=ddp_words(facts, bucket_cap_mb=cap_mb), expected_speedup=speedup,
        formula=f"T / (T - r x (min(A x (1 - 1/n), B) - A x o)) = {found.step_ms:.1f} / ({found.step_ms:.1f} - "
                f"{saved:.1f}) = {speedup:.3f}; A = {found.ms:.1f} ms of collectives, o = {found.overlap_pct / 100:.2f} "
                f"overlapped, B = {backward:.1f} ms of backward ops to hide them under, n = {after} buckets of "
                f"{cap_mb} MB (the last one's all-reduce waits anyway), r = {RECOVERABLE} (assumed)",
        notes=["Smaller buckets mean more all-reduce calls, each with its own latency: measure before keeping it."])


def _search_ms(facts: Facts) -> float | None:
    """DDP's own forward time per step outside the model's ops (its search of the graph for
    unused parameters, its buffers' broadcast); None when the op table lacks it."""
    profile = facts.profile
    own = [op["self_cpu_ms"] for op in (profile.top_ops if profile else [])
           if op["name"] == "DistributedDataParallel.forward"]
    return sum(own) / profile.steps if own and profile.steps else None


def _search_finding(facts: Facts, finding_id: str, title: str, setting: dict[str, bool], pct: float,
                    note: str) -> Finding | None:
    ddp, search = facts.seen(DdpFacts), _search_ms(facts)
    step = _window_step_ms(facts)
    if search is None or step <= 0 or 100 * search / step < pct:
        return None
    saved = RECOVERABLE * search
    speedup = step / (step - saved)
    return Finding(
        id=finding_id, title=title,
        evidence={"ddp_forward_ms": r(search), "step_ms": r(step), "find_unused_parameters": "true",
                  "unused_param_bytes": ddp.unused_param_bytes if ddp.unused_param_bytes is not None else "unknown"},
        advice=f"DDP's settings are the script's: {', '.join(f'{k}={v}' for k, v in setting.items())}",
        advice_code=ddp_words(facts, **setting), expected_speedup=speedup,
        formula=f"T / (T - r x D) = {step:.1f} / ({step:.1f} - {RECOVERABLE} x {search:.2f}) = {speedup:.3f}; D = ms "
                f"a step DDP's forward spends outside the model's ops (its search of the graph among them), "
                f"r = {RECOVERABLE} of it the search (assumed)",
        notes=[note])


def find_unused(facts: Facts, *, ddp_forward_pct: float = 1.0) -> Finding | None:
    """DDP searches the graph for unused parameters after every forward
    (``find_unused_parameters=True``), its forward's own time is ``ddp_forward_pct`` percent
    of the step or more, and no parameter went unused (or DDP did not say)."""
    ddp = facts.seen(DdpFacts)
    if not ddp.ddp or not ddp.find_unused_parameters or ddp.unused_param_bytes:
        return None
    return _search_finding(
        facts, "distributed.find_unused",
        "DDP searches the graph for unused parameters after every forward, and every parameter gets a gradient; "
        "set find_unused_parameters=False", {"find_unused_parameters": False}, ddp_forward_pct,
        "Should a parameter get no gradient in some step, DDP then raises at the next one, naming it (by index; "
        "by name under TORCH_DISTRIBUTED_DEBUG=INFO): keep find_unused_parameters=True for it, or "
        "static_graph=True when the same ones go unused every step.")


def static_graph(facts: Facts, *, ddp_forward_pct: float = 1.0) -> Finding | None:
    """Some parameters go unused (DDP's search found them), so ``find_unused_parameters``
    must stay on, ``static_graph`` is off, and DDP's forward takes ``ddp_forward_pct`` percent
    of the step or more: with a static graph DDP learns the unused ones once."""
    ddp = facts.seen(DdpFacts)
    if not ddp.ddp or not ddp.find_unused_parameters or ddp.static_graph or not ddp.unused_param_bytes:
        return None
    return _search_finding(
        facts, "distributed.static_graph",
        f"{ddp.unused_param_bytes / _MIB:.1f} MiB of parameters go unused and DDP searches the graph for them after "
        "every forward; set static_graph=True", {"static_graph": True}, ddp_forward_pct,
        "static_graph=True holds only where every step uses the same parameters the same way (no branch on the "
        "data or on the step); torch leaves any other graph unsupported under it.")


# -- worked examples: facts each rule fires on ------------------------------------------------

def ddp_example(*, collective_ms: float = 30.0, overlap_pct: float = 3.0, micro: float = 1.0, allreduces: int = 2,
                ddp_forward_ms: float = 0.2, **ddp: object) -> Facts:
    """Two ranks' step of 40 ms: forward 4, backward 33 (of it ``collective_ms`` minus what
    ``overlap_pct`` hides, waiting for the all-reduce), optimizer 3; a DDP wrapper of
    ``ddp`` settings over 64 MiB of gradients in 4 parameters (the largest 16 MiB), 3 buckets."""
    from torchboost.evidence.observed import ProfileFacts, StepRecord

    exposed = collective_ms * (1 - overlap_pct / 100)
    steps = [StepRecord(i, 40.0, forward_ms=4.0, backward_ms=33.0, optimizer_ms=3.0) for i in range(10)]
    phases = {"step": {"wall_ms": 40.0, "op_ms": 40.0 - exposed, "collective_ms": exposed},
              "forward": {"wall_ms": 4.0, "op_ms": 4.0 - ddp_forward_ms, "collective_ms": 0.0},
              "backward": {"wall_ms": 33.0, "op_ms": 33.0 - exposed, "collective_ms": exposed},
              "optimizer": {"wall_ms": 3.0, "op_ms": 3.0, "collective_ms": 0.0}}
    ops = [{"name": "aten::mm", "self_cpu_ms": 12.0, "self_device_ms": 0.0, "calls": 4},
           {"name": "DistributedDataParallel.forward", "self_cpu_ms": 2 * ddp_forward_ms, "self_device_ms": 0.0,
            "calls": 2},
           {"name": "c10d::allreduce_", "self_cpu_ms": 0.2, "self_device_ms": 0.0, "calls": allreduces}]
    settings = {"ddp": True, "world_size": 2, "backend": "gloo", "bucket_bytes": [_MIB, 25 * _MIB, 38 * _MIB],
                "grad_bytes": 64 * _MIB, "largest_param_bytes": 16 * _MIB, **ddp}
    return Facts(steps=steps, world_size=2, micro_steps_per_step=micro, techniques={"distributed": DdpFacts(**settings)},
                 profile=ProfileFacts(steps=2, top_ops=ops, collective_ms_per_step=collective_ms,
                                      collective_overlap_pct=overlap_pct, phases=phases))


def example_no_sync() -> Facts:
    """The all-reduce holds 73% of the step, no accumulation."""
    return ddp_example()


def example_bucket_cap() -> Facts:
    """The all-reduce holds 35% of the step, none of it beside 19 ms of backward ops."""
    return ddp_example(collective_ms=14.0, overlap_pct=0.0)


def example_find_unused() -> Facts:
    """find_unused_parameters=True, every parameter used; DDP's forward takes 2 ms a step."""
    return ddp_example(collective_ms=4.0, ddp_forward_ms=2.0, find_unused_parameters=True, unused_param_bytes=0)


def example_static_graph() -> Facts:
    """find_unused_parameters=True with 4 MiB of parameters unused every step."""
    return ddp_example(collective_ms=4.0, ddp_forward_ms=2.0, find_unused_parameters=True,
                       unused_param_bytes=4 * _MIB)
