"""GPU checks in one run: bf16 GEMM ceiling, GPT-2 124M tokens/s and MFU, vision data wait.

    python benchmarks/gpu_bench.py --out gpu-results          # on a CUDA machine (~5 min)
    python benchmarks/gpu_bench.py --smoke --out /tmp/gpu     # any machine: tiny sizes, CPU

1. A bf16 GEMM (8192^3) timed with CUDA events: the achievable matmul TFLOP/s here.
2. The gpt workload at GPT-2 124M, context 1024, through the Booster three ways: naive
   (fp32, eager, for-loop AdamW), hand (bf16 autocast and fused AdamW: what a
   tuning guide has one set by hand) and tuned (hand plus torch.compile and a tuned
   loader): tokens/s after warm-up, and model FLOPs utilisation of each against the
   H200's dense bf16 peak (989 TFLOP/s) and against the measured GEMM.
   FLOPs per token = 6 N + 12 L d T (weights, plus attention scores), as in the PaLM
   paper's accounting.
3. The vision workload observed as it is (0 workers) and with loader tuning applied
   from outside (workers, pinned memory, persistent workers): the share of each step
   spent waiting for data, before and after.

Prints a short table last and writes results.json (and the raw facts) to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

H200_BF16_DENSE_TFLOPS = 989.0
"""NVIDIA's dense bf16 tensor-core peak for the H200 SXM, TFLOP/s."""


def gemm_tflops(device: torch.device, n: int, repeats: int = 20) -> float:
    """Measured bf16 matmul TFLOP/s on ``device`` for n x n x n."""
    dtype = torch.bfloat16
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            a @ b
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    else:
        t0 = time.perf_counter()
        for _ in range(repeats):
            a @ b
        seconds = time.perf_counter() - t0
    return 2 * n**3 * repeats / seconds / 1e12


GPT_CONFIGS = {
    "naive": {},
    "hand": {"precision": {"mode": "bf16"}, "optimizer": {"implementation": "fused"}},
    "tuned": {"precision": {"mode": "bf16"}, "optimizer": {"implementation": "fused"},
              "compile": {"mode": "default"}, "loader": {"num_workers": 4, "pin_memory": True}},
}
"""The three ways GPT-2 124M runs (BoostConfig sections on top of everything off)."""


def gpt_throughput(size: str, steps: int, warmup: int, device: torch.device, how: str = "tuned") -> dict:
    """Tokens/s and achieved TFLOP/s of the gpt workload through the Booster, configured as
    :data:`GPT_CONFIGS` ``[how]`` (on a CPU: no loader workers or pinned memory)."""
    import torchboost
    from torchboost import BoostConfig
    from torchboost.workloads import gpt
    from torchboost.workloads._loop import make_loader

    work = gpt.build(size)
    shape = gpt.SHAPES[size]
    sections = dict(GPT_CONFIGS[how])
    if device.type != "cuda":
        sections.pop("loader", None)
    config = BoostConfig.off().replace(**sections)
    booster = torchboost.Booster(config, device=device, verbose=False)
    model = work.model
    model, optimizer, loader = booster.prepare(model, work.make_optimizer(model.parameters()),
                                               make_loader(work, seed=0))
    batches = iter(loader)
    times = []
    for step in range(warmup + steps):
        x, y = next(batches)
        if device.type == "cuda":
            torch.cuda.synchronize()  # per-step timing: one sync at the boundary
        t0 = time.perf_counter()
        with booster.autocast():
            loss = work.loss_fn(model(x), y)
        booster.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]
    tokens = work.batch_size * shape.context
    params = sum(p.numel() for p in work.model.parameters())
    flops_per_token = 6 * params + 12 * shape.layers * shape.dim * shape.context
    achieved = flops_per_token * tokens / step_s / 1e12
    return {
        "how": how, "size": size, "params": params, "batch": work.batch_size, "context": shape.context,
        "median_step_ms": 1e3 * step_s, "tokens_per_s": tokens / step_s, "achieved_tflops": achieved,
        "final_loss": float(loss.detach()), "compile_first_call_s": booster.compile_stats.first_call_s,
    }


def vision_data_wait(out: Path, steps: int, cuda: bool) -> dict:
    """Data-wait share of the vision workload before and after loader tuning (observed runs)."""
    from torchboost.config import BoostConfig, Overlay
    from torchboost.diagnose import summarize
    from torchboost.observe.parent.request import RunRequest
    from torchboost.observe.parent.supervise import run_observed

    command = [sys.executable, "-m", "torchboost.workloads.vision", "--steps", str(steps * 4)]
    tuned = {"loader.num_workers": 8 if cuda else 2, "loader.persistent_workers": True, "cpu.threads": 1}
    if cuda:
        tuned["loader.pin_memory"] = True
    result = {}
    for label, settings in (("before", {}), ("after", tuned)):
        # "before" keeps its profiler window: its trace is the one gpu_vs_hta.py compares
        observed = run_observed(RunRequest(command=command, steps=steps, warmup=3, out_dir=out / f"vision-{label}",
                                           apply=Overlay(settings).on(BoostConfig.off()), profile=label == "before",
                                           echo=False))
        summary = summarize(observed.facts)
        result[label] = {"settings": settings, "data_pct": summary.breakdown_pct["data"],
                         "median_step_ms": summary.step_time_ms["median"]}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-results")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on whatever device: checks the script")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda and not args.smoke:
        print("no CUDA GPU here: run with --smoke to check the script on a CPU", file=sys.stderr)
        return 2
    results = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__}
    results["gemm_tflops"] = gemm_tflops(device, 512 if args.smoke else 8192)
    results["gpt"] = {how: gpt_throughput("tiny" if args.smoke else "gpt2", steps=5 if args.smoke else 30,
                                          warmup=3 if args.smoke else 10, device=device, how=how)
                      for how in GPT_CONFIGS}
    results["vision"] = vision_data_wait(out, steps=5 if args.smoke else 20, cuda=cuda)
    for row in results["gpt"].values():
        row["mfu_vs_peak"] = row["achieved_tflops"] / H200_BF16_DENSE_TFLOPS
        row["mfu_vs_gemm"] = row["achieved_tflops"] / results["gemm_tflops"]
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    _print_table(results)
    return 0


def _print_table(results: dict) -> None:
    vb, va = results["vision"]["before"], results["vision"]["after"]
    print(f"\n{'check':<34} {'value':>14}")
    print(f"{'device':<34} {results['device']:>14}")
    print(f"{'bf16 GEMM TFLOP/s (measured)':<34} {results['gemm_tflops']:>14.1f}")
    for how, gpt in results["gpt"].items():
        print(f"{f'gpt {how} tokens/s':<34} {gpt['tokens_per_s']:>14,.0f}")
        print(f"{f'gpt {how} TFLOP/s, MFU (989; GEMM)':<34} {gpt['achieved_tflops']:>6.1f} "
              f"{gpt['mfu_vs_peak']:>6.1%} {gpt['mfu_vs_gemm']:.1%}")
    print(f"{'vision data wait, 0 workers':<34} {vb['data_pct']:>13.1f}%")
    print(f"{'vision data wait, tuned loader':<34} {va['data_pct']:>13.1f}%")
    print(f"{'vision ms/step before -> after':<34} {vb['median_step_ms']:>6.1f} -> {va['median_step_ms']:.1f}")


if __name__ == "__main__":
    sys.exit(main())
