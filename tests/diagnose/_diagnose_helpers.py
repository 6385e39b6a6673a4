"""Hand-made Facts for the diagnosis tests: one healthy baseline, varied per test."""

from __future__ import annotations

import sys
from dataclasses import fields, replace
from types import SimpleNamespace

from torchboost.frameworks import fix_toml, fix_torch
from torchboost.config import BoostConfig
from torchboost.diagnose.rules import RULES
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.observed import Facts, LoaderFacts, ModelFacts, OptimizerFacts, ProfileFacts, StepRecord
from torchboost.techniques.cudnn import CudnnFacts
from torchboost.techniques.memory import MemoryFacts
from torchboost.techniques.precision.precision_diagnosis import PrecisionFacts

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GIB = 2**30

R = SimpleNamespace(**{rule.__name__: rule for rule in RULES.values()})
"""Every rule by its function's name, wherever it is declared (a technique's module or diagnose)."""


def steps(n=10, *, data=10.0, forward=40.0, backward=40.0, optimizer=5.0, other=5.0, start=0):
    """``n`` identical steps; total = the sum of the phases."""
    total = data + forward + backward + optimizer + other
    return [
        StepRecord(index=start + i, total_ms=total, data_ms=data, forward_ms=forward,
                   backward_ms=backward, optimizer_ms=optimizer)
        for i in range(n)
    ]


def make_facts(device="cpu", *, cores=8, cpu_bf16=True, can_compile=True, cuda_bf16=True, **phases) -> Facts:
    """A run with no finding worth making unless a test changes something.

    Defaults: 10 steps of 100 ms (data 10, forward 40, backward 40, optimizer 5, other 5),
    bf16 autocast, compiled, AdamW already fused, workers already there, memory mostly used.
    """
    env = {
        "device": device, "cpu_cores": cores, "cpu_bf16": cpu_bf16, "cuda_bf16": cuda_bf16,
        "can_compile": can_compile, "ram_bytes": 64 * GIB,
    }
    return Facts(
        env=env,
        command=["python", "train.py"],
        steps=steps(**phases),
        loader=LoaderFacts(num_workers=2, pin_memory=device == "cuda", persistent_workers=True,
                           batch_size=32, num_batches=100),
        model=ModelFacts(class_name="Net", parameters=1_000_000, trainable_parameters=1_000_000,
                         param_dtypes=["torch.float32"], device=device, compiled=True),
        techniques={"precision": PrecisionFacts(autocast=True, autocast_dtype="bfloat16"),
                    "cudnn": CudnnFacts(cudnn_benchmark=True),
                    "memory": MemoryFacts()},
        optimizer=OptimizerFacts(class_name="AdamW", foreach=None, fused=True, supports_fused=True),
        cpu_threads=max(1, cores - 2),
        peak_memory_bytes=60 * GIB if device == "cuda" else 0,
        device_memory_total_bytes=80 * GIB if device == "cuda" else 0,
        peak_rss_bytes=50 * GIB,
    )


def with_(facts: Facts, **changes) -> Facts:
    """A copy of ``facts`` with nested parts changed: ``with_(f, loader={"num_workers": 0})``.

    A key the named part does not have (or a name that is no field of Facts, such as
    ``precision``) goes to the technique's facts that have it: ``model={"channels_last":
    True}`` sets the memory technique's, ``precision={"cudnn_benchmark": False}`` cuDNN's.
    """
    out = replace(facts, techniques=dict(facts.techniques))
    for name, value in changes.items():
        if not isinstance(value, dict):
            setattr(out, name, value)
            continue
        part = getattr(out, name) if name in {f.name for f in fields(Facts)} else None
        own = {k: v for k, v in value.items() if part is not None and hasattr(part, k)}
        if own:
            setattr(out, name, replace(part, **own))
        for key, item in value.items():
            if key in own:
                continue
            technique = next(t for t, seen in out.techniques.items() if hasattr(seen, key))
            out.techniques[technique] = replace(out.techniques[technique], **{key: item})
    return out


def check_finding(finding, rule_id):
    """The common shape every finding must have; returns it for further checks."""
    assert finding is not None, f"{rule_id} did not fire"
    assert finding.id == rule_id
    assert finding.expected_speedup > 1.0
    assert finding.title and finding.formula and fix_torch(finding)
    assert finding.evidence and all(isinstance(v, (int, float, str)) for v in finding.evidence.values())
    # Every fragment is valid torchboost.toml (comment-only fragments are the empty table).
    BoostConfig.from_dict(tomllib.loads(fix_toml(finding)))
    assert f"= {finding.expected_speedup:.3f}" in finding.formula  # the formula shows its result
    return finding


def profile(sync=0.0, ops=(), steps_profiled=5, sync_ops=None):
    """A ProfileFacts with ``ops`` given as (name, self_cpu_ms, self_device_ms) totals."""
    return ProfileFacts(
        steps=steps_profiled,
        top_ops=[{"name": n, "self_cpu_ms": c, "self_device_ms": d, "calls": 1} for n, c, d in ops],
        sync_count_per_step=sync,
        sync_ops=sync_ops or {},
    )


def _host_steps(n=20, *, every=5, save_ms=30.0, output_ms=0.1):
    """Steps of 19 ms of the loop's own work, a print each (``output_ms``) and a ``save_ms``
    checkpoint every ``every`` steps, from step 10 on (after 10 steps of warm-up)."""
    out = []
    for i in range(10, 10 + n):
        save = save_ms if every and i % every == 0 else 0.0
        out.append(StepRecord(i, 19.0 + output_ms + save, data_ms=1.0, forward_ms=8.0, backward_ms=8.0,
                              optimizer_ms=1.0, checkpoint_ms=save, output_ms=output_ms))
    return out


def _host_facts(n=20, every=5, save_ms=30.0, written=4_000_000, prints=1):
    steps = [i for i in range(10, 10 + n) if every and i % every == 0]
    return HostFacts(checkpoint_steps=steps, checkpoint_ms=[save_ms] * len(steps),
                     checkpoint_bytes=[written] * len(steps), output_calls=prints * n)


def checkpointed(*, every=5, save_ms=30.0) -> Facts:
    """A run that saves ``save_ms`` checkpoints every ``every`` steps of 19 ms (by default 24%
    of the step) and prints every step."""
    return with_(make_facts(), steps=_host_steps(every=every, save_ms=save_ms), warmup_steps=10,
                 host=_host_facts(every=every, save_ms=save_ms))


def printing(output_ms=2.0, prints=3) -> Facts:
    """A run that prints ``prints`` lines a step, ``output_ms`` in all, and never saves."""
    return with_(make_facts(), steps=_host_steps(every=0, output_ms=output_ms), warmup_steps=10,
                 host=_host_facts(every=0, prints=prints))
