"""How far a step is from the machine's limit: its FLOPs against the measured matmul peak.

Plain data in, plain data out: :func:`headroom_of` takes the observed :class:`Facts` and
the probe's :class:`~torchboost.limits.MachineLimits` and returns a :class:`Headroom`;
:func:`cap_findings` caps the findings' expected gains with it.

    achieved_flops_per_s = flops_per_step / median step time
    mfu_pct              = 100 x achieved / peak (the probe's, for the step's dtype:
                           autocast's or the parameters' bf16/fp16, else on a GPU tf32
                           for the kind of op torch lets use it: convolutions when cuDNN's
                           TF32 is on (torch's default), matmuls when cuBLAS's is; else
                           fp32; fp32's when that dtype was not measured. Where an fp32
                           step's convolutions and matmuls differ, each op's FLOPs are
                           held against its own dtype's peak: peak = FLOPs / sum(FLOPs_op
                           / peak_op), and a note says so)
    best_speedup         = 100 / mfu_pct: the step's FLOPs at the peak, the most any
                           setting can give in the step's dtype (1.0 when the step already
                           runs at the peak)
    best_speedup_in(d)   = peak(d) / achieved: the most a change that moves the matmuls to
                           dtype d (bf16 autocast, bf16 math in fp32 matmuls) can give; such a
                           finding (``Finding.dtype``) is capped by it, not by the step's own peak.
                           The headline names the fastest measured dtype when its peak is over
                           ``FASTER_DTYPE_RATIO`` times the step's.

What bounds the step (``bound``), the first rule that holds:

1. ``data``: the loop waits for its DataLoader for ``DATA_BOUND_PCT`` or more of the step;
2. ``communication``: collectives (DDP's all-reduce) with no op of the training thread
   beside them hold ``COMMUNICATION_BOUND_PCT`` or more of the step
   (:mod:`torchboost.diagnose.held`);
3. ``compute``: forward, backward and optimizer together run their FLOPs at
   ``COMPUTE_BOUND_PCT`` or more of the peak (the matmuls run near the roof);
4. ``python`` or ``host``, the larger: a phase's time is mostly outside its ops and that
   Python is ``PYTHON_BOUND_PCT`` or more of the step (:mod:`torchboost.diagnose.held`;
   its ops then say nothing of the step, and no roofline is drawn from them), or
   ``HOST_BOUND_PCT`` or more of the step is outside the phases (Python between them,
   logging, synchronisations);
5. ``memory``: the ops that carry FLOPs take under ``MATMUL_TIME_PCT`` of the profiled op
   time: the step's time goes to ops that move bytes (elementwise, norms, copies);
6. ``compute`` otherwise: matmuls are the time but run below the roof (small or narrow shapes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torchboost.diagnose.data_bound import replay_bound
from torchboost.diagnose.held import communication_words, python_line, python_phase
from torchboost.diagnose.measured import ranked
from torchboost.diagnose.roofline import OpRoof, op_roofs
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import HOST_PHASES, Facts
from torchboost.evidence.steps import summarize
from torchboost.limits import machine_limits
from torchboost.limits.machine import MachineLimits

__all__ = ["Headroom", "headroom_of", "measured_headroom", "cap_findings", "limits_device", "step_dtype", "PROBED_DEVICES", "DATA_BOUND_PCT", "COMPUTE_BOUND_PCT",
           "HOST_BOUND_PCT", "MATMUL_TIME_PCT", "FASTER_DTYPE_RATIO"]

DATA_BOUND_PCT = 30.0
"""Share of the step spent waiting for data from which the step is data-bound, percent."""
COMPUTE_BOUND_PCT = 50.0
"""Forward+backward+optimizer FLOP rate, percent of the peak, from which the step is compute-bound."""
HOST_BOUND_PCT = 30.0
"""Share of the step outside every phase from which the step is host-bound, percent."""
MATMUL_TIME_PCT = 50.0
"""Share of the profiled op time in FLOP-carrying ops under which the step is memory-bound, percent."""
FASTER_DTYPE_RATIO = 1.2
"""How many times the step's dtype's peak another dtype's must be for the headline to name it."""

PROBED_DEVICES = ("cpu", "cuda")
"""The devices whose peak the probe measures (:mod:`torchboost.limits`)."""

_NOT_COMPUTE = {"communication": "communication", "python": "Python"}
"""Bounds no compute setting moves, as the headline names them: it gives no "left in compute" for them."""

_DTYPES = {"bfloat16": "bf16", "torch.bfloat16": "bf16", "float16": "fp16", "torch.float16": "fp16"}


@dataclass(frozen=True)
class Headroom:
    """The step against the machine's measured peak (see the module docstring)."""

    flops_per_step: int | None
    achieved_flops_per_s: float | None
    """FLOPs per step over the median step time."""
    peak_flops_per_s: float | None
    """The probe's matmul peak for ``dtype``; where an fp32 step's convolutions and matmuls
    run in different dtypes (cuDNN's TF32 on, cuBLAS's off), each op's FLOPs at its own
    dtype's peak (the step's FLOPs over the time they take at those peaks)."""
    dtype: str
    """The dtype the step's matmuls run in, as the probe names it ("fp32", "bf16"...)."""
    mfu_pct: float | None
    bound: str
    """"data", "communication", "compute", "python", "host" or "memory"."""
    why: str
    """The rule that gave ``bound``, with its numbers."""
    best_speedup: float | None
    """The most any setting can speed the step up: 100 / ``mfu_pct``, at least 1."""
    machine: dict[str, Any]
    """The probe's figures the headroom rests on: name, threads, cpu_share, peaks, bandwidth."""
    notes: tuple[str, ...] = ()
    """Caveats: the dtype's peak was not measured, the probe ran on a busy machine..."""
    ops: tuple[OpRoof, ...] = ()
    """The hottest operators against their roofs (:mod:`torchboost.diagnose.roofline`)."""

    def peak_of(self, dtype: str) -> float | None:
        """The probe's matmul peak in ``dtype``, FLOP/s; None when it was not measured."""
        return (self.machine.get("peak_flops_per_s") or {}).get(dtype)

    def best_speedup_in(self, dtype: str) -> float | None:
        """The most a change that moves the step's matmuls to ``dtype`` can give: the step's
        FLOPs at that dtype's peak (the step's own cap where ``dtype`` was not measured)."""
        peak = self.peak_of(dtype) if dtype else None
        if peak is None or not self.achieved_flops_per_s:
            return self.best_speedup
        return max(1.0, peak / self.achieved_flops_per_s)

    @property
    def faster_dtype(self) -> str | None:
        """The measured dtype whose peak is highest, where it is over ``FASTER_DTYPE_RATIO``
        times the step's dtype's peak; None when the step already runs in the fastest."""
        peaks = {d: p for d, p in (self.machine.get("peak_flops_per_s") or {}).items() if p}
        if not peaks or not self.peak_flops_per_s:
            return None
        best = max(peaks, key=lambda d: peaks[d])
        return best if best != self.dtype and peaks[best] > FASTER_DTYPE_RATIO * self.peak_flops_per_s else None

    @property
    def line(self) -> str:
        """The one line the reports lead with."""
        if self.mfu_pct is None or self.best_speedup is None:
            return f"The step's FLOPs against this machine's peak: not known ({self.why}); bound: {self.bound}."
        share = f"{self.mfu_pct:.0f}%" if self.mfu_pct >= 1 else f"{self.mfu_pct:.2g}%"
        head = f"This step runs at {share} of this machine's {self.dtype} matmul peak"
        if self.bound in _NOT_COMPUTE:
            return f"{head}, but compute does not hold it. Bound: {_NOT_COMPUTE[self.bound]} ({self.why})."
        faster = self.faster_dtype
        if faster is not None:
            ratio = self.peak_of(faster) / self.peak_flops_per_s
            return (f"{head}; its {faster} peak is {ratio:.1f}x higher: {self.best_speedup:.1f}x is left in "
                    f"{self.dtype} compute, up to {self.best_speedup_in(faster):.1f}x in {faster}. "
                    f"Bound: {self.bound} ({self.why}).")
        if self.best_speedup <= 1.0:
            return f"{head}, at or above what the probe measured; nothing is left in compute. Bound: {self.bound}."
        return (f"{head}; at most {self.best_speedup:.1f}x is left in compute. "
                f"Bound: {self.bound} ({self.why}).")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict, the line included."""
        return {**dataclasses.asdict(self), "notes": list(self.notes), "line": self.line}


def _is_conv(op: str) -> bool:
    """A convolution among the FLOP count's ops ("aten.convolution", its backward)."""
    return "convolution" in op


def fp32_kinds(facts: Facts) -> dict[str, str]:
    """The dtype whose peak holds each kind of op of an fp32 step: {"matmul": ..., "conv": ...}.
    On CUDA, "tf32" where torch allows TF32 for that kind (cuBLAS's matmul switch; cuDNN's
    convolution switch, on by default), else "fp32"; on any other device "fp32" for both."""
    precision = facts.precision
    cuda = bool(facts.model and facts.model.device.startswith("cuda"))
    return {"matmul": "tf32" if cuda and precision.tf32_matmul else "fp32",
            "conv": "tf32" if cuda and precision.tf32_cudnn else "fp32"}


def _by_op(facts: Facts) -> dict[str, int]:
    """The FLOP count's ops that carried FLOPs."""
    return {op: flops for op, flops in facts.flops_by_op.items() if flops}


def _conv_flop_share(facts: Facts) -> float:
    """Share (0..1) of the step's counted FLOPs in convolutions; 0 without a count by op."""
    by_op = _by_op(facts)
    total = facts.flops_per_step or sum(by_op.values())
    return sum(flops for op, flops in by_op.items() if _is_conv(op)) / total if total else 0.0


def step_dtype(facts: Facts) -> str:
    """The dtype the step's FLOPs run in: autocast's, else the parameters' reduced one, else,
    in fp32, the dtype of the kind of op that carries most of them (:func:`fp32_kinds`:
    tf32 for a conv net on a GPU whose cuDNN allows it, for matmuls where cuBLAS does)."""
    precision = facts.precision
    if precision.autocast_dtype in _DTYPES:
        return _DTYPES[precision.autocast_dtype]
    params = facts.model.param_dtypes if facts.model else []
    reduced = [_DTYPES[d] for d in params if d in _DTYPES]
    if reduced and len(reduced) == len(params):
        return reduced[0]
    kinds = fp32_kinds(facts)
    return kinds["conv"] if _conv_flop_share(facts) > 0.5 else kinds["matmul"]


def _op_peaks(facts: Facts, limits: MachineLimits, dtype: str) -> tuple[dict[str, float], str | None]:
    """The peak of each counted op whose kind runs in another dtype than the step's (an fp32
    step's convolutions in TF32 beside matmuls in fp32, or the reverse), by op, and the
    note that says so; ({}, None) when every op runs in ``dtype``."""
    if dtype not in ("fp32", "tf32"):
        return {}, None
    kinds, by_op = fp32_kinds(facts), _by_op(facts)
    peaks = {op: limits.peak_flops_per_s(kinds["conv" if _is_conv(op) else "matmul"]) for op in by_op}
    other = {op: p for op, p in peaks.items() if p and kinds["conv" if _is_conv(op) else "matmul"] != dtype}
    if not other:
        return {}, None
    conv = _is_conv(next(iter(other)))
    kind = "convolutions" if conv else "matmuls"
    held = kinds["conv" if conv else "matmul"]
    why = "cuDNN allows TF32 in fp32 convolutions" if held == "tf32" and conv else (
        "cuBLAS allows TF32 in fp32 matmuls" if held == "tf32" else "TF32 is off for them")
    share = sum(by_op[op] for op in other) / max(1, facts.flops_per_step or sum(by_op.values()))
    return other, (f"the {kind} ({100 * share:.0f}% of the FLOPs) are held against the {held} peak ({why}), "
                   f"the rest against the {dtype} peak")


def _blended_peak(facts: Facts, peak: float | None, op_peaks: dict[str, float]) -> float | None:
    """The step's peak with each op at its own (``op_peaks``; ``peak`` for the rest, the ops
    outside the count's few included): its FLOPs over the time they take at those peaks."""
    flops = facts.flops_per_step
    if not op_peaks or not flops or not peak:
        return peak
    by_op = _by_op(facts)
    seconds = sum(f / op_peaks.get(op, peak) for op, f in by_op.items()) + max(0, flops - sum(by_op.values())) / peak
    return flops / seconds if seconds > 0 else peak


def _matmul_time_pct(facts: Facts) -> float | None:
    """Share of the profiled op time in the ops that carried FLOPs; None without a profile."""
    ops = facts.profile.top_ops if facts.profile else []
    if not ops or not facts.flops_by_op:
        return None
    names = {name.replace(".", "::") for name in facts.flops_by_op}
    time = {op["name"]: max(op["self_cpu_ms"], op["self_device_ms"]) for op in ops}
    total = sum(time.values())
    return 100.0 * sum(t for n, t in time.items() if n in names) / total if total else None


def _phases_rate_pct(flops: int | None, phase_ms: dict[str, float], peak: float | None) -> float | None:
    """``flops`` in the forward, backward and optimizer time of ``phase_ms``, as a percent of ``peak``."""
    busy_ms = phase_ms["forward"] + phase_ms["backward"] + phase_ms["optimizer"]
    return 100.0 * flops / (busy_ms / 1000.0) / peak if flops and peak and busy_ms > 0 else None


def _bound(facts: Facts, phase_ms: dict[str, float], pct: dict[str, float], peak: float | None) -> tuple[str, str]:
    if pct["data"] >= DATA_BOUND_PCT:
        replayed = replay_bound(facts)
        measured = (f"; fed batches from memory, with no loader work, it ran {replayed[0]:.1f}x faster"
                    if replayed else "")
        return "data", f"{pct['data']:.0f}% of the step waits for the DataLoader{measured}"
    rate_pct = _phases_rate_pct(facts.flops_per_step, phase_ms, peak)
    communication = communication_words(facts)
    if communication is not None:
        return "communication", communication[1]
    if rate_pct is not None and rate_pct >= COMPUTE_BOUND_PCT:
        return "compute", f"forward, backward and optimizer run at {rate_pct:.0f}% of the peak"
    host_pct = sum(pct.get(phase, 0.0) for phase in HOST_PHASES)
    python = python_phase(facts)
    if python is not None and (host_pct < HOST_BOUND_PCT or python.step_pct >= host_pct):
        return "python", python.words(python_line(facts, python.phase))
    if host_pct >= HOST_BOUND_PCT:
        top = python_line(facts, "other")
        at = f", most of it at {top}" if top else ""
        return "host", f"{host_pct:.0f}% of the step is outside forward, backward, optimizer and data{at}"
    matmul_pct = _matmul_time_pct(facts)
    if matmul_pct is not None and matmul_pct < MATMUL_TIME_PCT:
        return "memory", f"the FLOP-carrying ops take {matmul_pct:.0f}% of the op time; the rest moves bytes"
    if rate_pct is None:
        return "compute", "forward and backward are most of the step"
    return "compute", f"matmuls are the time but run at {rate_pct:.0f}% of the peak"


def limits_device(facts: Facts) -> str | None:
    """The device whose measured peak the step is held against: "cuda" or "cpu"; None for a
    step on another device (Apple's MPS), whose peak the probe does not measure: the CPU's
    would say nothing of it."""
    device = (facts.model.device if facts.model is not None else "cpu").split(":")[0]
    return device if device in PROBED_DEVICES else None


def _unprobed(facts: Facts) -> Headroom:
    """The headroom of a step on a device the probe does not measure: its bound, no peak."""
    summary = summarize(facts)
    device = facts.model.device if facts.model is not None else "?"
    bound, _ = _bound(facts, summary.phase_ms, summary.breakdown_pct, None)
    return Headroom(flops_per_step=facts.flops_per_step, achieved_flops_per_s=None, peak_flops_per_s=None,
                    dtype=step_dtype(facts), mfu_pct=None, bound=bound, best_speedup=None, machine={"device": device},
                    why=f"the step runs on {device}, whose peak the probe does not measure; it is not held against "
                        "the CPU's")


def headroom_of(facts: Facts, limits: MachineLimits | None, busy: str | None = None) -> Headroom:
    """The step of ``facts`` against ``limits``; ``busy``: a note that the probe shared the
    machine. ``limits`` None: the step's device was not probed (:func:`limits_device`), its
    headroom is not known and no finding is capped by it."""
    if limits is None:
        return _unprobed(facts)
    summary = summarize(facts)
    dtype = step_dtype(facts)
    notes = [busy] if busy else []
    peak = limits.peak_flops_per_s(dtype)
    if peak is None:
        notes.append(f"the probe measured no {dtype} peak here ({dtype} does not run natively); "
                     "the fp32 peak is used")
        peak = limits.peak_flops_per_s("fp32")
    op_peaks, held = _op_peaks(facts, limits, dtype)
    notes += [held] if held else []
    roof_peak, peak = peak, _blended_peak(facts, peak, op_peaks)
    median = summary.step_time_ms["median"]
    flops = facts.flops_per_step
    achieved = flops / (median / 1000.0) if flops and median else None
    mfu = 100.0 * achieved / peak if achieved and peak else None
    rate = _phases_rate_pct(flops, summary.phase_ms, peak)
    if rate is not None and rate > 100.0:  # more work than the median step's phases hold at the peak
        busy_ms = sum(summary.phase_ms[phase] for phase in ("forward", "backward", "optimizer"))
        notes.append(f"the counted step's {flops:.3g} FLOPs in the median step's forward, backward and optimizer "
                     f"({busy_ms:.2f} ms) would run at {rate:.0f}% of the measured peak, which no step does: the "
                     "counted step did more than a typical one (an evaluation or another forward pass inside it), "
                     "so no MFU is given")
        achieved = mfu = None
        facts = dataclasses.replace(facts, flops_per_step=None)  # the bound's rule reads no FLOPs either
    bound, why = _bound(facts, summary.phase_ms, summary.breakdown_pct, peak)
    if flops is None:
        why = facts.flops_error or "the FLOPs of a step were not counted"
    elif not flops:
        why = facts.flops_error or "no FLOPs counted"
    machine = {"name": limits.name, "device": limits.device, "threads": limits.threads,
               "cpu_share": min((m.cpu_share for m in limits.matmul), default=1.0),
               "peak_flops_per_s": {d: limits.peak_flops_per_s(d) for d in limits.dtypes},
               "bandwidth_bytes_per_s": limits.bandwidth_bytes_per_s}
    return Headroom(flops_per_step=flops, achieved_flops_per_s=achieved, peak_flops_per_s=peak, dtype=dtype,
                    mfu_pct=mfu, bound=bound, why=why, best_speedup=max(1.0, 100.0 / mfu) if mfu else None,
                    machine=machine, notes=tuple(notes),
                    ops=() if bound == "python" else op_roofs(facts, roof_peak, limits.bandwidth_bytes_per_s or None,
                                                              op_peaks))


def measured_headroom(facts: Facts, shared: str | None = None) -> Headroom:
    """The step of ``facts`` against this machine's measured peak, for its device: the
    probe's cached figures, measured (a few seconds) when absent or when the cached probe
    ran on a busy machine (the best of both is kept); no peak for a device the probe does
    not measure (:func:`limits_device`). ``shared``: the note that the run itself shared the
    machine. Raises what the probe raises."""
    device = limits_device(facts)
    if device is None:  # MPS: not held against the CPU's peak
        return headroom_of(facts, None)
    limits, _ = machine_limits(device, facts.cpu_threads if device == "cpu" else None, refresh_busy=True)
    notes = [words for words in (shared, limits.busy_note) if words]
    return headroom_of(facts, limits, "; ".join(notes) or None)


def cap_findings(findings: list[Finding], headroom: Headroom | None) -> list[Finding]:
    """``findings`` with every per-step gain above what its dtype leaves capped at it (a note
    says so): a finding that moves the step to another dtype (:attr:`Finding.dtype`) is held
    to that dtype's peak, the others to the step's own. Unchanged without a headroom; memory
    fixes (a time cost) are left alone. Ranked again after (a measured ratio is not capped)."""
    if headroom is None or headroom.best_speedup is None:
        return list(findings)
    out = []
    for f in findings:
        best = headroom.best_speedup_in(f.dtype)
        if f.unit == "step" and f.memory_ratio is None and f.expected_speedup > best:
            dtype = f.dtype if headroom.peak_of(f.dtype) else headroom.dtype
            note = (f"capped at {best:.2f}x (estimated {f.expected_speedup:.2f}x): the step's FLOPs at this "
                    f"machine's measured {dtype} matmul peak allow no more")
            f = dataclasses.replace(f, expected_speedup=best, severity="", notes=[*f.notes, note])
        out.append(f)
    return ranked(out)
