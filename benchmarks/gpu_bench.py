"""The full GPU stage's measurements, one sub-command a part.

    python benchmarks/gpu_bench.py gemm --out DIR                     # the GEMM ceilings -> DIR/gemm.json
    python benchmarks/gpu_bench.py gpt --out DIR [--tuned CONFIG_DIR]  # GPT-2 124M naive and tuned -> DIR/gpt.json
    python benchmarks/gpu_bench.py gpt --tiny --out /tmp/gpu           # any machine: tiny sizes, checks the script

``benchmarks/gpu.sh`` runs each part in its own process under its own time limit;
``benchmarks/gpu_results.py`` turns their JSON into results.md and results.json.

1. ``gemm``: an 8192^3 matmul in each math a training step uses (bf16, fp16, TF32: fp32
   tensors under ``torch.set_float32_matmul_precision("high")``, and full fp32), timed with
   CUDA events: the achievable TFLOP/s here, the ceilings MFU is also held against.
2. ``gpt``: the gpt workload at GPT-2 124M (context 1024, batch :data:`GPT_BATCH`, the batch
   ``torchboost tune`` tuned it at in gpu.sh) through the Booster two ways: naive (every
   technique off: fp32, eager, for-loop AdamW, the plain DataLoader) and tuned (the
   configuration ``torchboost tune`` wrote in CONFIG_DIR: torchboost.toml, or
   torchboost.unverified.toml when its end-to-end check had no time). Each step is timed
   from the loader's ``next()`` to the device's sync after ``zero_grad()``, so the loader's
   time is inside it; tokens/s from the median step after the warm-up, the allocator's peak,
   the model FLOPs a step (6 N + 12 L d T a token: the non-embedding weights and the
   lm head, plus attention scores, as nanoGPT and the PaLM paper count them), and how
   compilation went (its first call's seconds, whether it fell back to eager and why).
   gpt.json is rewritten after each way, so a part cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tomllib
from pathlib import Path

import torch

GPT_BATCH = 16
"""Sequences a step for GPT-2 124M: its fp32 eager step peaks near 30 GiB at context 1024,
well inside an 80 GiB card, and tune measures its candidates at the same batch."""

MATHS = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
"""The GEMM ceilings measured: the math's name -> the tensors' dtype (tf32: fp32 tensors, TF32 math)."""

TUNED_FILES = ("torchboost.toml", "torchboost.unverified.toml")
"""Where tune writes its pick in its config folder: verified (or unchecked), then unverified."""


def gemm_tflops(device: torch.device, n: int, math: str = "bf16", repeats: int = 20) -> float:
    """Measured matmul TFLOP/s on ``device`` for n x n x n in ``math`` (a key of :data:`MATHS`)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if math == "tf32" else "highest")
    try:
        a = torch.randn(n, n, device=device, dtype=MATHS[math])
        b = torch.randn(n, n, device=device, dtype=MATHS[math])
        for _ in range(3):
            a @ b
        seconds = _timed(device, lambda: [a @ b for _ in range(repeats)])
    finally:
        torch.set_float32_matmul_precision(before)
    return 2 * n**3 * repeats / seconds / 1e12


def _timed(device: torch.device, work) -> float:
    """Seconds ``work()`` takes on ``device`` (CUDA events on a GPU, the wall clock elsewhere)."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        work()
        return time.perf_counter() - t0
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    torch.cuda.synchronize()  # the events' elapsed time needs both done
    return start.elapsed_time(end) / 1e3


def tuned_config(folder: Path | None) -> tuple[Path | None, str]:
    """The configuration tune wrote in ``folder`` and which file it is, or None and why not."""
    if folder is None:
        return None, "no tune folder given"
    for name in TUNED_FILES:
        if (folder / name).is_file():
            return folder / name, name
    return None, f"tune wrote no configuration in {folder.name}/ (nothing kept, or it did not finish: see tune.log)"


def _math(config_path: Path | None) -> str:
    """The math a configuration's matmuls compute in: autocast's dtype, else fp32_math's, else fp32."""
    if config_path is None:
        return "fp32"
    data = tomllib.loads(config_path.read_text(encoding="utf-8"))
    precision = data.get("precision", {}).get("mode")
    fp32_math = data.get("fp32_math", {}).get("mode")
    return precision if precision in ("bf16", "fp16") else fp32_math if fp32_math in ("bf16", "tf32") else "fp32"


def gpt_throughput(size: str, steps: int, warmup: int, device: torch.device, config_path: Path | None,
                   batch: int | None = None) -> dict:
    """Tokens/s, achieved TFLOP/s, peak allocated bytes and how compilation went for the gpt
    workload through the Booster: every technique off when ``config_path`` is None, else the
    TOML file there; the loader's ``next()`` inside each timed step."""
    import torchboost
    from torchboost import BoostConfig
    from torchboost.workloads import gpt
    from torchboost.workloads._loop import make_loader

    work = gpt.build(size, batch_size=batch)
    shape = gpt.SHAPES[size]
    config = BoostConfig.off() if config_path is None else BoostConfig.from_toml(config_path)
    booster = torchboost.Booster(config, device=device, verbose=False)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model, optimizer, loader = booster.prepare(work.model, work.make_optimizer(work.model.parameters()),
                                               make_loader(work, seed=0))
    batches = iter(loader)
    times = []
    for step in range(warmup + steps):
        _sync(device)
        t0 = time.perf_counter()
        x, y = (t.to(device, non_blocking=True) for t in next(batches))
        with booster.autocast():
            loss = work.loss_fn(model(x), y)
        booster.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        _sync(device)  # per-step timing: one sync at the step's end
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]
    tokens = work.batch_size * shape.context
    params = sum(p.numel() for p in work.model.parameters())
    # nanoGPT's count: the position table is a lookup, the tied token table is the lm head's matmul
    matmul_params = params - work.model.positions.weight.numel()
    flops_per_token = 6 * matmul_params + 12 * shape.layers * shape.dim * shape.context
    stats = booster.compile_stats
    return {
        "config": None if config_path is None else config_path.name, "math": _math(config_path), "size": size,
        "params": params, "batch": work.batch_size, "context": shape.context, "steps": steps, "warmup": warmup,
        "median_step_ms": 1e3 * step_s, "tokens_per_s": tokens / step_s, "flops_per_token": flops_per_token,
        "achieved_tflops": flops_per_token * tokens / step_s / 1e12, "final_loss": float(loss.detach()),
        "peak_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "compile": None if stats is None else {"mode": stats.mode, "first_call_s": stats.first_call_s,
                                                "fell_back": stats.fell_back, "error": stats.error,
                                                "recompile_limit_hit": stats.recompile_limit_hit},
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def _device_words(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"device": "cpu", "torch": torch.__version__}
    props = torch.cuda.get_device_properties(device)
    return {"device": props.name, "memory_bytes": props.total_memory, "torch": torch.__version__,
            "cuda": torch.version.cuda, "capability": f"{props.major}.{props.minor}"}


def run_gemm(out: Path, tiny: bool, device: torch.device) -> int:
    """The ``gemm`` part: OUT/gemm.json, rewritten after each math."""
    n = 256 if tiny else 8192
    result: dict = {**_device_words(device), "n": n, "tflops": {}}
    for math in MATHS:
        result["tflops"][math] = gemm_tflops(device, n, math)
        _write(out / "gemm.json", result)
        print(f"{math} GEMM {n}^3: {result['tflops'][math]:.1f} TFLOP/s on {result['device']}", flush=True)
    return 0


def run_gpt(out: Path, tiny: bool, device: torch.device, batch: int, tuned: Path | None) -> int:
    """The ``gpt`` part: OUT/gpt.json, rewritten after each way (an error is recorded, the next way runs)."""
    config_path, words = tuned_config(tuned)
    result: dict = {**_device_words(device), "batch": batch, "tuned_config": words, "runs": {}}
    ways = {"naive": None, "tuned": config_path}
    failed = 0
    for how, path in ways.items():
        if how == "tuned" and path is None:
            result["runs"][how] = {"skipped": words}
            print(f"gpt {how}: not measured: {words}", flush=True)
            continue
        try:
            row = gpt_throughput("tiny" if tiny else "gpt2", steps=5 if tiny else 20, warmup=3 if tiny else 5,
                                 device=device, config_path=path, batch=batch)
            print(f"gpt {how}: {row['tokens_per_s']:,.0f} tokens/s, {row['achieved_tflops']:.1f} TFLOP/s, "
                  f"batch {row['batch']}, median step {row['median_step_ms']:.1f} ms", flush=True)
        except Exception as exc:  # noqa: BLE001 - recorded, and the next way still runs
            failed += 1
            row = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            print(f"gpt {how}: FAILED: {row['error']}", flush=True)
        result["runs"][how] = row
        _write(out / "gpt.json", result)
        _free(device)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: one part (``gemm``, ``gpt``); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    for name in ("gemm", "gpt"):
        sub = parts.add_parser(name)
        sub.add_argument("--out", required=True, type=Path, help="folder for the part's JSON")
        sub.add_argument("--tiny", action="store_true", help="tiny sizes on whatever device: checks the script")
        if name == "gpt":
            sub.add_argument("--batch", type=int, default=GPT_BATCH, help=f"sequences a step (default {GPT_BATCH})")
            sub.add_argument("--tuned", type=Path, default=None,
                             help="the folder of tune's --config file (default: naive only)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        print("no CUDA GPU here: run with --tiny to check the script on a CPU", file=sys.stderr)
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    if args.part == "gemm":
        return run_gemm(args.out, args.tiny, device)
    return run_gpt(args.out, args.tiny, device, args.batch, args.tuned)


if __name__ == "__main__":
    sys.exit(main())
