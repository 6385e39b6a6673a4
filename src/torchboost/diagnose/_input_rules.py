"""Rules that belong to no technique: host-device syncs in the script, memory headroom.

Each rule reads Facts only and returns a Finding or None; thresholds are keyword
parameters with their unit in the name. Registered in :data:`torchboost.diagnose.rules.RULES`
beside the techniques' own rules. Their fixes are changes in the script (``advice``);
under accumulation the memory finding's neutral form is a setting of the accumulation
technique.
"""

from __future__ import annotations

import math
from typing import Any

from torchboost.config import Overlay
from torchboost.evidence.rulekit import per_step_ms, r, view
from torchboost.evidence.observed import Facts
from torchboost.evidence.findings import Finding
from torchboost.techniques.accumulation import AccumulationConfig

__all__ = ["loss_nonfinite", "memory_headroom", "sync_host_device"]

# Device idle per sync while the host queues the next kernels again, when the profile
# does not time the syncs themselves: a few kernel launches' worth (assumed).
_SYNC_GAP_MS = 0.05


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def loss_nonfinite(facts: Facts) -> Finding | None:
    """The loss the script called backward on is NaN or inf at some step (warm-up included):
    the run is wrong before it is slow, so this comes before every speedup."""
    losses = [*facts.warmup_losses, *facts.losses]
    bad = [i for i, x in enumerate(losses) if not math.isfinite(x)]
    if not bad:
        return None
    first, value = facts.loss_step(bad[0]), losses[bad[0]]
    word = "NaN" if math.isnan(value) else str(value)
    where = "from its first step" if first == 0 else f"from step {first} (its {_ordinal(first + 1)} step)"
    return Finding(
        id="loss.nonfinite",
        title=f"The loss is {word} {where}: fix that before tuning",
        evidence={"first_nonfinite_step": first, "nonfinite_steps": len(bad), "steps": len(losses)},
        expected_speedup=1.0,
        severity="high",
        blocking=True,
        advice="Find where the loss first goes non-finite (torch.autograd.set_detect_anomaly(True) for one "
               "run names the op); a learning rate too high, log(0), or an fp16 overflow without a GradScaler "
               "are the usual causes. No speedup is worth measuring on a run that does not train.",
        advice_code="torch.autograd.set_detect_anomaly(True)  # for one run: the traceback names the op",
        formula="none: no speed is at stake until the loss is finite (steps counted from 0, as a loop over "
                "range() counts them)",
        notes=[f"{len(bad)} of the {len(losses)} observed steps had a non-finite loss."],
    )


def _is_sync(name: str) -> bool:
    return "Synchronize" in name or name == "aten::_local_scalar_dense"


def sync_host_device(facts: Facts, *, sync_per_step: float = 1.0) -> Finding | None:
    """The host waits for the device at least ``sync_per_step`` times per step (``.item()``,
    ``.cpu()``, ``print(tensor)``, data-dependent shapes): the host cannot queue the next
    step's work while the device runs, so host time (data, Python) stops overlapping."""
    profile, v = facts.profile, view(facts)
    if v.device == "cpu" or profile is None or v.step_ms <= 0:
        return None  # on a CPU nothing runs asynchronously, so a sync costs nothing
    count = profile.sync_count_per_step
    if count < sync_per_step:
        return None
    host = v.ms["data"] + v.host_ms
    blocked = per_step_ms(profile, _is_sync)
    if blocked:
        saved = min(blocked, host)
        basis = f"min(B, H) = min({blocked:.2f}, {host:.2f}); B profiled ms blocked in syncs per step"
    else:
        saved = min(host, count * _SYNC_GAP_MS)
        basis = f"min(H, n x g) = min({host:.2f}, {count:g} x {_SYNC_GAP_MS}); g device idle per sync (assumed)"
    if saved <= 0:
        return None
    speedup = v.step_ms / (v.step_ms - saved)
    ops = ", ".join(f"{name} x{n}" for name, n in sorted(profile.sync_ops.items(), key=lambda kv: -kv[1])[:3])
    return Finding(
        id="sync.host_device",
        title=f"The host waits for the device {count:g} times per step; keep values on the device",
        evidence={
            "syncs_per_step": r(count, 2),
            "sync_ops": ops or "unknown",
            "host_ms_per_step": r(host),
            "step_ms": r(v.step_ms),
            **({"blocked_ms_per_step": r(blocked)} if blocked else {}),
        },
        advice="the syncs are in the training script: keep values on the device",
        advice_code="running_loss += loss.detach()  # stays on the device, no sync\n"
                    "if step % 100 == 0:\n    print(running_loss.item() / 100)  # one sync per 100 steps",
        expected_speedup=speedup,
        formula=f"T / (T - S) = {v.step_ms:.2f} / ({v.step_ms:.2f} - {saved:.2f}) = {speedup:.3f}; "
                f"S ms of host work (data and the rest of the host's, H) that could overlap device work = {basis}",
        notes=["Common sources: loss.item() every step, tensor.cpu()/.tolist(), bool(tensor) in an if, "
               "torch.nonzero and boolean-mask indexing."],
    )


def memory_headroom(facts: Facts, *, memory_used_pct: float = 50.0) -> Finding | None:
    """Peak memory is under ``memory_used_pct`` percent of the device (or RAM on a CPU run):
    a micro-batch k times larger fits. Under gradient accumulation over K micro-batches the
    neutral form keeps the global batch (micro-batch x k, accumulation K / k) and spreads
    each micro-step's fixed cost; without accumulation a larger batch changes what is
    trained, so the finding is marked so and its gain is per sample."""
    v = view(facts)
    if v.device == "cuda":
        peak, total, where = facts.peak_memory_bytes, facts.device_memory_total_bytes, "GPU memory"
    elif v.device == "cpu":
        peak, total, where = facts.peak_rss_bytes, int(facts.env.get("ram_bytes") or 0), "RAM"
    else:
        return None
    if peak <= 0 or total <= 0 or v.step_ms <= 0 or 100 * peak / total >= memory_used_pct:
        return None
    k = 1
    while k < 8 and peak * k * 2 <= 0.8 * total:  # all memory scaled with the batch: conservative
        k *= 2
    if k < 2:
        return None
    batch = facts.loader.batch_size if facts.loader else None
    evidence = {"peak_memory_bytes": peak, "memory_total_bytes": total, "memory_used_pct": r(100 * peak / total, 1),
                "batch_factor": k, "step_ms": r(v.step_ms), **({"batch_size": batch} if batch else {})}
    title = f"Peak {where} is {100 * peak / total:.0f}% of {total / 2**30:.1f} GiB"
    micro = int(facts.micro_steps_per_step or 1)
    if micro >= 2:
        return _headroom_neutral(v, facts, k, micro, batch, evidence, title)
    return _headroom_batch(v, k, batch, evidence, title)


def _headroom_neutral(v: Any, facts: Facts, k: int, micro: int, batch: int | None, evidence: dict,
                      title: str) -> Finding | None:
    while k > 1 and micro % k:
        k //= 2
    if k < 2:
        return None
    other = v.host_ms
    new_ms = v.step_ms - other + other / k
    speedup = v.step_ms / new_ms if new_ms > 0 else 1.0
    if speedup <= 1.0:
        return None
    target = f"batch_size={batch * k}" if batch else f"each micro-batch {k}x larger"
    # Through the Booster the accumulation is a setting; otherwise the script's own loop changes.
    fix = Overlay.of(AccumulationConfig, steps=micro // k) if facts.uses_booster else Overlay()
    advice = (f"and {target} in your DataLoader" if facts.uses_booster
              else f"set {target} and accumulate over {micro // k} micro-batches")
    return Finding(
        id="memory.headroom",
        title=f"{title}; micro-batches {k}x larger over {micro // k} accumulation steps keep the global batch",
        evidence={**evidence, "batch_factor": k, "micro_steps_per_step": micro, "other_ms_per_step": r(other)},
        fix=fix,
        advice=advice,
        advice_code=f"loader = DataLoader(dataset, {target}, ...)  # and step every {micro // k} micro-batches",
        expected_speedup=speedup,
        formula=f"T / (T - O + O / k) = {v.step_ms:.2f} / ({v.step_ms - other:.2f} + {other:.2f} / {k}) = "
                f"{speedup:.3f}; O ms per step outside the phases, paid per micro-step, k = {k} "
                f"(divides the {micro} micro-steps; peak x k <= 80% of total)",
        notes=["The global batch and the optimisation are unchanged: the same samples per optimizer step."],
    )


def _headroom_batch(v: Any, k: int, batch: int | None, evidence: dict, title: str) -> Finding | None:
    fixed = v.ms["optimizer"] + v.host_ms
    new_per_sample = (v.step_ms - fixed) + fixed / k
    speedup = v.step_ms / new_per_sample if new_per_sample > 0 else 1.0
    if speedup <= 1.0:
        return None
    target = f"batch_size={batch * k}" if batch else f"a batch size {k}x the current one"
    return Finding(
        id="memory.headroom",
        title=f"{title}; a batch {k}x larger would take {speedup:.2f}x less time per sample",
        evidence={**evidence, "fixed_ms_per_step": r(fixed)},
        advice=f"the batch size is the script's: set {target} in your DataLoader",
        advice_code=(f"loader = DataLoader(dataset, batch_size={batch * k}, ...)" if batch
                     else f"# build each batch {k}x larger where the script makes it"),
        expected_speedup=speedup,
        formula=f"time per sample T / (T - F + F / k) = {v.step_ms:.2f} / ({v.step_ms - fixed:.2f} + "
                f"{fixed:.2f} / {k}) = {speedup:.3f}; F fixed ms per step (optimizer + host outside the phases), "
                f"k = {k} (peak x k <= 80% of total, assuming all memory grows with the batch)",
        notes=["A larger batch changes the optimisation (fewer, larger steps): scale the learning rate "
               "and check the loss curve; tune does not measure it.",
               "On a GPU, a small batch also leaves cores idle, so the real gain is often larger."],
        changes_training=True,
        unit="sample",
    )
