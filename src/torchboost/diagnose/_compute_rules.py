"""Rules about the maths of the step: precision, compile, optimizer, cuDNN, memory layout.

Each rule reads Facts only and returns a Finding or None; thresholds are keyword
parameters with their unit in the name. Registered in :data:`torchboost.diagnose.rules.RULES`.
Factors marked "assumed" are typical published gains; the tuner measures the real one.
"""

from __future__ import annotations

from torchboost.diagnose._shared import REDUCED_DTYPES, amdahl, dtype_name, matmul_share, r, view
from torchboost.diagnose.facts import Facts
from torchboost.diagnose.finding import Finding

__all__ = [
    "precision_lower",
    "precision_slower_on_cpu",
    "compile_enable",
    "optimizer_fused",
    "cudnn_benchmark",
    "memory_channels_last",
]

_CUDA_HALF_FACTOR = 2.0  # tensor cores and half the memory traffic vs plain fp32 (assumed)
_CUDA_HALF_OVER_TF32 = 1.3  # what is left once TF32 already feeds the tensor cores (assumed)
_CPU_BF16_FACTOR = 1.3  # bf16 matmuls on a CPU with bf16 instructions, when not measured (assumed)
_CPU_BF16_NO_ISA = 0.5  # bf16 emulated without bf16 instructions: about 2x slower (assumed)
_COMPILE_FACTOR = {"cuda": 1.3, "cpu": 1.15}  # fused kernels, less Python (assumed)
_FUSED_OVER_FOREACH = 1.5  # fused optimizer vs the foreach one (assumed)
_FUSED_OVER_LOOP = 3.0  # fused optimizer vs the per-parameter loop (assumed)
_CUDNN_BENCHMARK_FACTOR = 1.15  # autotuned vs heuristic conv algorithms (assumed)
_CHANNELS_LAST_FACTOR = 1.2  # NHWC convs in reduced precision skip layout transposes (assumed)


def _reduced(facts: Facts) -> bool:
    """Reduced precision is already in use: autocast to bf16/fp16, or half parameters."""
    p = facts.precision
    if p.autocast and dtype_name(p.autocast_dtype) in REDUCED_DTYPES:
        return True
    return bool(facts.model) and any(dtype_name(d) in REDUCED_DTYPES for d in facts.model.param_dtypes)


def _cpu_matmul_factor(speed: float, share: float | None) -> tuple[float, str]:
    # On a CPU only the matmul/conv kernels change speed with bf16; weight the factor by their share.
    if share is None:
        return speed, "all forward+backward time assumed to be matmul/conv"
    return amdahl(share, speed), f"matmul/conv share m = {share:.2f} of profiled op time"


def precision_lower(
    facts: Facts, *, compute_pct: float = 50.0, cpu_bf16_min_speedup: float = 1.05
) -> Finding | None:
    """fp32 forward+backward take at least ``compute_pct`` percent of the step on hardware that
    runs bf16 (or fp16) faster. On a CPU a measured bf16 speedup decides (at least
    ``cpu_bf16_min_speedup``); without one, the CPU must have bf16 instructions."""
    v = view(facts)
    f = v.compute_share
    if _reduced(facts) or f * 100 < compute_pct:
        return None
    p, env, notes = facts.precision, facts.env, []
    if v.device == "cuda":
        dtype = "bf16" if env.get("cuda_bf16") else "fp16"
        factor = _CUDA_HALF_OVER_TF32 if p.tf32_matmul else _CUDA_HALF_FACTOR
        basis = f"s = {factor} ({'over TF32' if p.tf32_matmul else 'over fp32'}; assumed)"
    elif v.device == "cpu":
        dtype, measured = "bf16", facts.cpu_bf16_speedup
        if measured is not None:
            if measured < cpu_bf16_min_speedup:
                return None
            speed, how = measured, f"measured bf16 matmul speedup {measured:.2f}"
        elif env.get("cpu_bf16"):
            speed, how = _CPU_BF16_FACTOR, f"bf16 matmul speedup {_CPU_BF16_FACTOR} (not measured; assumed)"
            notes.append("The CPU has bf16 instructions but the speedup was not measured: torchboost tune measures it.")
        else:
            return None  # no bf16 instructions and no measurement: bf16 would be slower here
        factor, share_note = _cpu_matmul_factor(speed, matmul_share(facts.profile))
        basis = f"s = {factor:.3f} from {how}, {share_note}"
    else:
        return None
    speedup = amdahl(f, factor)
    torch_dtype = "torch.bfloat16" if dtype == "bf16" else "torch.float16"
    fix_torch = f'with torch.autocast("{v.device}", dtype={torch_dtype}):\n    loss = criterion(model(x), y)'
    if dtype == "fp16":
        fix_torch += ('\nscaler = torch.amp.GradScaler("cuda")  # fp16 needs loss scaling\n'
                      "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()")
    notes.append("Reduced precision changes the maths: torchboost tune keeps it only if the loss "
                 "trajectory stays within tolerance of fp32.")
    return Finding(
        id="precision.lower",
        title=f"Forward and backward run in fp32 ({f * 100:.0f}% of the step); use {dtype} autocast",
        evidence={
            "compute_pct": r(f * 100, 1),
            "device": v.device,
            "autocast": "off",
            "tf32_matmul": str(p.tf32_matmul).lower(),
            **({"cpu_bf16_speedup": r(facts.cpu_bf16_speedup)} if facts.cpu_bf16_speedup is not None else {}),
        },
        fix_toml=f'[precision]\nmode = "{dtype}"',
        fix_torch=fix_torch,
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, {basis}",
        notes=notes,
    )


def precision_slower_on_cpu(facts: Facts, *, cpu_bf16_slow_speedup: float = 1.0) -> Finding | None:
    """bf16/fp16 autocast on a CPU where it is slower than fp32: a measured bf16 speedup below
    ``cpu_bf16_slow_speedup`` decides; without one, a CPU lacking bf16 instructions."""
    v, p = view(facts), facts.precision
    dtype = dtype_name(p.autocast_dtype)
    if v.device != "cpu" or not p.autocast or dtype not in REDUCED_DTYPES:
        return None
    measured = facts.cpu_bf16_speedup if dtype == "bfloat16" else None
    if measured is not None:
        if measured >= cpu_bf16_slow_speedup:
            return None
        speed, how = measured, f"measured bf16 matmul speedup {measured:.2f}"
    elif facts.env.get("cpu_bf16"):
        return None  # bf16 instructions present and nothing measured: no evidence it is slower
    else:
        speed, how = _CPU_BF16_NO_ISA, f"{dtype} without bf16 instructions ~{_CPU_BF16_NO_ISA} (assumed)"
    f = v.compute_share
    # Returning to fp32 turns each reduced-precision ms into ``speed`` ms of fp32 on the matmul share.
    share = matmul_share(facts.profile)
    m = 1.0 if share is None else share
    new = 1.0 - f + f * ((1.0 - m) + m * speed)
    if f <= 0 or new <= 0 or new >= 1.0:
        return None
    speedup = 1.0 / new
    notes = ["Measure, don't assume: torchboost tune times both precisions on your model."]
    if p.grad_scaler:
        notes.append("The GradScaler only matters for fp16; drop it with the autocast.")
    return Finding(
        id="precision.slower_on_cpu",
        title=f"{dtype} autocast is slower than fp32 on this CPU; train in fp32",
        evidence={
            "autocast_dtype": dtype,
            "cpu_bf16_instructions": str(bool(facts.env.get("cpu_bf16"))).lower(),
            "compute_pct": r(f * 100, 1),
            **({"cpu_bf16_speedup": r(measured)} if measured is not None else {}),
        },
        fix_toml='[precision]\nmode = "fp32"',
        fix_torch=f'with torch.autocast("cpu", dtype=torch.{dtype}, enabled=False):  # fp32 is faster here\n'
                  "    loss = criterion(model(x), y)",
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f ((1 - m) + m s)) = {speedup:.3f}; f = {f:.3f} forward+backward share, "
                f"m = {m:.2f} matmul/conv share, s = {speed:.2f} from {how}",
        notes=notes,
    )


def compile_enable(facts: Facts, *, compute_pct: float = 50.0, compile_cost_s: float = 60.0) -> Finding | None:
    """Forward+backward take at least ``compute_pct`` percent of the step, the model is not
    compiled and Inductor can compile here; skipped when the planned run is too short to pay
    back a compile of ``compile_cost_s`` seconds."""
    v, model = view(facts), facts.model
    if model is None or model.compiled or not facts.env.get("can_compile") or v.step_ms <= 0:
        return None
    f = v.compute_share
    if f * 100 < compute_pct or v.device not in _COMPILE_FACTOR:
        return None
    factor = _COMPILE_FACTOR[v.device]
    speedup = amdahl(f, factor)
    saved_ms = v.step_ms - v.step_ms / speedup
    break_even = compile_cost_s * 1000.0 / saved_ms
    if facts.planned_steps is not None and facts.planned_steps < break_even:
        return None  # the compile would cost more than it saves over the whole run
    regional = model.parameters >= 100_000_000
    fix_toml = '[compile]\nmode = "default"' + ('\nscope = "regional"' if regional else "")
    return Finding(
        id="compile.enable",
        title=f"The model runs eagerly and forward+backward are {f * 100:.0f}% of the step; compile it",
        evidence={
            "compute_pct": r(f * 100, 1),
            "step_ms": r(v.step_ms),
            "break_even_steps": int(break_even) + 1,
            "parameters": model.parameters,
            **({"planned_steps": facts.planned_steps} if facts.planned_steps is not None else {}),
        },
        fix_toml=fix_toml,
        fix_torch="model = torch.compile(model)",
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, "
                f"s = {factor} on {v.device} (assumed); pays back a {compile_cost_s:g} s compile "
                f"after {int(break_even) + 1} steps",
        notes=[f"The first compile costs tens of seconds to minutes (assumed {compile_cost_s:g} s here) "
               "and new input shapes recompile; worth it for long runs.",
               "A compile that fails falls back to eager with a warning."]
              + (["Large model: regional compile (each repeated block) compiles much faster."] if regional else []),
    )


def optimizer_fused(facts: Facts, *, optimizer_pct: float = 5.0) -> Finding | None:
    """The optimizer step takes at least ``optimizer_pct`` percent of the step and the optimizer
    supports ``fused=True`` on this device but does not use it."""
    opt, v = facts.optimizer, view(facts)
    if opt is None or not opt.supports_fused or opt.fused or v.share["optimizer"] * 100 < optimizer_pct:
        return None
    # foreach=None means the default: foreach on CUDA, the per-parameter loop on CPU.
    foreach = opt.foreach if opt.foreach is not None else v.device == "cuda"
    factor = _FUSED_OVER_FOREACH if foreach else _FUSED_OVER_LOOP
    f = v.share["optimizer"]
    speedup = amdahl(f, factor)
    name = opt.class_name or "AdamW"
    return Finding(
        id="optimizer.fused",
        title=f"{name} steps {'with foreach kernels' if foreach else 'parameter by parameter'} "
              f"({f * 100:.0f}% of the step); use the fused implementation",
        evidence={
            "optimizer_pct": r(f * 100, 1),
            "optimizer_ms_per_step": r(v.ms["optimizer"]),
            "optimizer": name,
            "implementation": "foreach" if foreach else "for-loop",
        },
        fix_toml='[optimizer]\nimplementation = "fused"',
        fix_torch=f"optimizer = torch.optim.{name}(model.parameters(), ..., fused=True)",
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} optimizer share, "
                f"s = {factor} fused over {'foreach' if foreach else 'for-loop'} (assumed)",
        notes=["Same update maths; fused kernels round slightly differently at the last bit."],
    )


def cudnn_benchmark(facts: Facts, *, compute_pct: float = 50.0) -> Finding | None:
    """A conv net on CUDA with forward+backward at least ``compute_pct`` percent of the step and
    cuDNN's autotuner off: it picks conv algorithms by heuristic instead of by timing them."""
    v, model = view(facts), facts.model
    if v.device != "cuda" or model is None or not model.has_conv2d or facts.precision.cudnn_benchmark:
        return None
    f = v.compute_share
    if f * 100 < compute_pct:
        return None
    speedup = amdahl(f, _CUDNN_BENCHMARK_FACTOR)
    return Finding(
        id="cudnn.benchmark",
        title="Convolutions use cuDNN's heuristic algorithm choice; let it benchmark them",
        evidence={"compute_pct": r(f * 100, 1), "has_conv2d": "true", "cudnn_benchmark": "false"},
        fix_toml="[cudnn]\nbenchmark = true",
        fix_torch="torch.backends.cudnn.benchmark = True",
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, "
                f"s = {_CUDNN_BENCHMARK_FACTOR} (assumed)",
        notes=["Pays off when input shapes are fixed; each new shape is benchmarked again "
               "and the first steps are slower."],
    )


def memory_channels_last(facts: Facts, *, compute_pct: float = 50.0) -> Finding | None:
    """A conv net on CUDA in reduced precision with NCHW weights: tensor-core conv kernels want
    NHWC (channels_last) and otherwise transpose. Fires at ``compute_pct`` percent forward+backward."""
    v, model = view(facts), facts.model
    if v.device != "cuda" or model is None or not model.has_conv2d or model.channels_last or not _reduced(facts):
        return None
    f = v.compute_share
    if f * 100 < compute_pct:
        return None
    speedup = amdahl(f, _CHANNELS_LAST_FACTOR)
    return Finding(
        id="memory.channels_last",
        title="Convolutions in reduced precision run on NCHW tensors; use channels_last",
        evidence={"compute_pct": r(f * 100, 1), "has_conv2d": "true", "channels_last": "false",
                  "autocast_dtype": dtype_name(facts.precision.autocast_dtype) or "none"},
        fix_toml="[memory]\nchannels_last = true",
        fix_torch="model = model.to(memory_format=torch.channels_last)\n"
                  "x = x.to(device, memory_format=torch.channels_last)",
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, "
                f"s = {_CHANNELS_LAST_FACTOR} (assumed)",
        notes=["Only 4-D inputs change layout; check the gain, some layers prefer NCHW."],
    )
