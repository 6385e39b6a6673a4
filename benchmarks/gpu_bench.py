"""The full GPU stage's measurements and its summary, one sub-command a part.

    python benchmarks/gpu_bench.py gemm --out OUT      # bf16 GEMM ceiling -> OUT/gemm.json
    python benchmarks/gpu_bench.py gpt --out OUT       # GPT-2 124M three ways -> OUT/gpt.json
    python benchmarks/gpu_bench.py summary OUT         # every part's figures -> results.json, results.md
    python benchmarks/gpu_bench.py gpt --tiny --out /tmp/gpu   # any machine: tiny sizes, checks the script

``benchmarks/gpu.sh`` runs each part in its own process under its own time limit.

1. ``gemm``: a bf16 8192^3 matmul timed with CUDA events: the achievable matmul TFLOP/s here.
2. ``gpt``: the gpt workload at GPT-2 124M, context 1024, through the Booster three ways:
   naive (fp32, eager, for-loop AdamW), hand (bf16 autocast and fused AdamW: what a tuning
   guide has one set by hand) and tuned (hand plus torch.compile and a tuned loader):
   tokens/s after warm-up (median step), the allocator's peak, and model FLOPs utilisation
   against the H200's dense bf16 peak (989 TFLOP/s) and against the measured GEMM. FLOPs per
   token = 6 N + 12 L d T (weights, plus attention scores), the PaLM paper's accounting. The
   batch is the same for all three: the largest power of two from 8 up whose naive step (the
   hungriest: fp32 activations) peaks under 80% of the card's memory, unless ``--batch``.
   gpt.json is rewritten after each way, so a part cut short keeps what it measured.
3. ``summary``: reads gpu.sh's parts.tsv and each part's output (gemm.json, gpt.json, the
   doctor's and tune's report.json, hta.json) and writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

H200_BF16_DENSE_TFLOPS = 989.0
"""NVIDIA's dense bf16 tensor-core peak for the H200 SXM, TFLOP/s (used only on an H200)."""

MEMORY_FRACTION = 0.8
"""The probed batch's naive step must peak under this share of the card's memory."""

GPT_CONFIGS = {
    "naive": {},
    "hand": {"precision": {"mode": "bf16"}, "optimizer": {"implementation": "fused"}},
    "tuned": {"precision": {"mode": "bf16"}, "optimizer": {"implementation": "fused"},
              "compile": {"mode": "default"}, "loader": {"num_workers": 4, "pin_memory": True}},
}
"""The three ways GPT-2 124M runs (BoostConfig sections on top of everything off)."""


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


def gpt_throughput(size: str, steps: int, warmup: int, device: torch.device, how: str = "tuned",
                   batch: int | None = None) -> dict:
    """Tokens/s, achieved TFLOP/s and peak allocated bytes of the gpt workload through the
    Booster, configured as :data:`GPT_CONFIGS` ``[how]`` (on a CPU: no loader workers or
    pinned memory), at ``batch`` sequences a step (the workload's own when None)."""
    import torchboost
    from torchboost import BoostConfig
    from torchboost.workloads import gpt
    from torchboost.workloads._loop import make_loader

    work = gpt.build(size, batch_size=batch)
    shape = gpt.SHAPES[size]
    sections = dict(GPT_CONFIGS[how])
    if device.type != "cuda":
        sections.pop("loader", None)
    config = BoostConfig.off().replace(**sections)
    booster = torchboost.Booster(config, device=device, verbose=False)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model, optimizer, loader = booster.prepare(work.model, work.make_optimizer(work.model.parameters()),
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
    return {
        "how": how, "size": size, "params": params, "batch": work.batch_size, "context": shape.context,
        "steps": steps, "warmup": warmup, "median_step_ms": 1e3 * step_s, "tokens_per_s": tokens / step_s,
        "achieved_tflops": flops_per_token * tokens / step_s / 1e12, "final_loss": float(loss.detach()),
        "compile_first_call_s": booster.compile_stats.first_call_s,
        "peak_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    }


def fitting_batch(device: torch.device, first: int = 8, most: int = 256) -> tuple[int, list[dict]]:
    """The largest batch (powers of two from ``first``) whose naive GPT-2 step peaks under
    :data:`MEMORY_FRACTION` of the card's memory, and every probe's peak (two steps each)."""
    total = torch.cuda.get_device_properties(device).total_memory
    kept, probes, batch = first, [], first
    while batch <= most:
        try:
            peak = gpt_throughput("gpt2", steps=1, warmup=1, device=device, how="naive", batch=batch)["peak_bytes"]
        except torch.OutOfMemoryError:
            peak = None
        _free(device)
        probes.append({"batch": batch, "peak_bytes": peak, "total_bytes": total})
        print(f"batch {batch}: peak {'out of memory' if peak is None else f'{peak / 2**30:.1f} GiB'}"
              f" of {total / 2**30:.0f} GiB", flush=True)
        if peak is None or peak > MEMORY_FRACTION * total:
            break
        kept, batch = batch, 2 * batch
    return kept, probes


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
    """The ``gemm`` part: OUT/gemm.json."""
    n = 512 if tiny else 8192
    result = {**_device_words(device), "n": n, "gemm_tflops": gemm_tflops(device, n)}
    _write(out / "gemm.json", result)
    print(f"bf16 GEMM {n}^3: {result['gemm_tflops']:.1f} TFLOP/s on {result['device']}")
    return 0


def run_gpt(out: Path, tiny: bool, device: torch.device, batch: int | None) -> int:
    """The ``gpt`` part: OUT/gpt.json, rewritten after each way (an error is recorded, the next way runs)."""
    result: dict = {**_device_words(device), "runs": {}}
    if batch is None and not tiny:
        batch, result["batch_probes"] = fitting_batch(device)
    result["batch"] = batch
    failed = 0
    for how in GPT_CONFIGS:
        try:
            row = gpt_throughput("tiny" if tiny else "gpt2", steps=5 if tiny else 20, warmup=3 if tiny else 5,
                                 device=device, how=how, batch=batch)
            print(f"gpt {how}: {row['tokens_per_s']:,.0f} tokens/s, {row['achieved_tflops']:.1f} TFLOP/s, "
                  f"batch {row['batch']}, median step {row['median_step_ms']:.1f} ms", flush=True)
        except Exception as exc:  # noqa: BLE001 - recorded, and the next way still runs
            failed += 1
            row = {"how": how, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            print(f"gpt {how}: FAILED: {row['error']}", flush=True)
        result["runs"][how] = row
        _write(out / "gpt.json", result)
        _free(device)
    return 1 if failed else 0


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _parts(out: Path) -> list[dict]:
    """gpu.sh's parts.tsv: each part's name, status, exit code, seconds and time limit."""
    rows = []
    try:
        lines = (out / "parts.tsv").read_text(encoding="utf-8").splitlines()
    except OSError:
        return rows
    for line in lines:
        name, status, code, seconds, limit = (line.split("\t") + [""] * 5)[:5]
        rows.append({"name": name, "status": status, "exit_code": int(code) if code.lstrip("-").isdigit() else None,
                     "seconds": float(seconds or 0), "limit_s": float(limit or 0)})
    return rows


def _gpt_rows(gpt: dict | None, gemm: dict | None) -> dict:
    """gpt.json's runs, each with its MFU against the H200's peak (on an H200) and the GEMM."""
    runs = dict((gpt or {}).get("runs", {}))
    on_h200 = "H200" in (gpt or {}).get("device", "")
    naive = runs.get("naive", {}).get("tokens_per_s")
    for row in runs.values():
        if "tokens_per_s" not in row:
            continue
        row["mfu_vs_peak"] = row["achieved_tflops"] / H200_BF16_DENSE_TFLOPS if on_h200 else None
        row["mfu_vs_gemm"] = row["achieved_tflops"] / gemm["gemm_tflops"] if gemm else None
        row["speedup_vs_naive"] = row["tokens_per_s"] / naive if naive else None
    return runs


def _doctor(report: dict | None) -> dict | None:
    """The doctor report's headline figures: step time, phases, GPU shares, MFU, top findings."""
    if report is None:
        return None
    headroom = report.get("headroom") or {}
    return {"steps_measured": report.get("steps_measured"), "median_step_ms": report["step_time_ms"].get("median"),
            "breakdown_pct": report.get("breakdown_pct"), "gpu": report.get("gpu"), "mfu_pct": headroom.get("mfu_pct"),
            "findings": [{"id": f["id"], "expected_speedup": f.get("expected_speedup"), "title": f["title"]}
                         for f in report.get("findings", [])[:5]]}


def _tune(report: dict | None) -> dict | None:
    """The tune report's headline: what it kept, the end-to-end speedup and verdict, its time."""
    if report is None:
        return None
    return {key: report.get(key) for key in ("status", "error", "speedup", "search_speedup", "settings",
                                              "verdict", "elapsed_s", "before", "after", "stopped_by_budget")}


def summarize(out: Path) -> int:
    """Write OUT/results.json and OUT/results.md from every part's output and print the table;
    returns 1 when a part did not end well, else 0."""
    gemm, gpt = _read(out / "gemm.json"), _read(out / "gpt.json")
    results = {
        "machine": {k: v for k, v in (gemm or gpt or {}).items() if k not in ("n", "gemm_tflops", "runs")},
        "parts": _parts(out), "gemm": gemm, "gpt_batch": (gpt or {}).get("batch"),
        "gpt_batch_probes": (gpt or {}).get("batch_probes"), "gpt": _gpt_rows(gpt, gemm),
        "doctor": _doctor(_read(out / "doctor" / "report.json")), "tune": _tune(_read(out / "tune" / "report.json")),
        "hta": _read(out / "hta.json"),
    }
    _write(out / "results.json", results)
    text = "\n".join(_markdown(results))
    (out / "results.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if results["parts"] and all(p["status"] == "ok" for p in results["parts"]) else 1


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _markdown(r: dict) -> list[str]:
    """results.md: the machine, each part's status, then one table per part that measured."""
    machine = r["machine"]
    lines = [f"# GPU full stage: {machine.get('device', '?')}, torch {machine.get('torch', '?')}, "
             f"CUDA {machine.get('cuda', '?')}", "", "| part | status | seconds (limit) |", "|---|---|---:|"]
    lines += [f"| {p['name']} | {p['status']} | {p['seconds']:.0f} ({p['limit_s']:.0f}) |" for p in r["parts"]]
    if r["gemm"]:
        lines += ["", f"bf16 GEMM {r['gemm']['n']}^3: **{r['gemm']['gemm_tflops']:.1f} TFLOP/s** measured."]
    if r["gpt"]:
        batch = r["gpt_batch"] or next((row.get("batch") for row in r["gpt"].values() if "batch" in row), "?")
        lines += ["", f"GPT-2 124M, context 1024, batch {batch} (median step after warm-up):", "",
                  "| way | tokens/s | x naive | TFLOP/s | MFU (989 peak) | MFU (GEMM) | ms/step | peak GiB "
                  "| compile s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for how, row in r["gpt"].items():
            if "error" in row:
                lines.append(f"| {how} | failed: {row['error']} | | | | | | | |")
                continue
            peak = "-" if row.get("peak_bytes") is None else f"{row['peak_bytes'] / 2**30:.1f}"
            compiled = row.get("compile_first_call_s")
            lines.append(f"| {how} | {row['tokens_per_s']:,.0f} | {row['speedup_vs_naive'] or 0:.2f} | "
                         f"{row['achieved_tflops']:.1f} | {_pct(row['mfu_vs_peak'])} | {_pct(row['mfu_vs_gemm'])} | "
                         f"{row['median_step_ms']:.1f} | {peak} | {'-' if compiled is None else f'{compiled:.0f}'} |")
    lines += _doctor_lines(r["doctor"]) + _tune_lines(r["tune"])
    if r["hta"] and r["hta"].get("torchboost"):
        from gpu_vs_hta import table

        lines += ["", "The doctor's GPU shares against HTA's, same trace:", "", table(r["hta"])]
    return lines


def _doctor_lines(doctor: dict | None) -> list[str]:
    if not doctor:
        return []
    gpu = doctor["gpu"]
    phases = ", ".join(f"{k} {v:.0f}%" for k, v in (doctor["breakdown_pct"] or {}).items())
    idle = "no GPU facts in its trace" if gpu is None else f"GPU idle {gpu['idle_pct']:.1f}%"
    mfu = "" if doctor["mfu_pct"] is None else f", MFU {doctor['mfu_pct']:.1f}%"
    lines = ["", f"Doctor on char_gpt.py: median step {doctor['median_step_ms']:.2f} ms over "
                 f"{doctor['steps_measured']} steps ({phases}); {idle}{mfu}."]
    return lines + [f"- `{f['id']}` x{f['expected_speedup'] or 0:.2f}: {f['title']}" for f in doctor["findings"]]


def _tune_lines(tune: dict | None) -> list[str]:
    if not tune:
        return []
    kept = ", ".join(f"{k}={v}" for k, v in (tune["settings"] or {}).items()) or "nothing"
    return ["", f"Tune on char_gpt.py ({tune['elapsed_s'] or 0:.0f} s): kept {kept}; end to end "
                f"x{tune['speedup'] or 0:.2f} (search x{tune['search_speedup'] or 0:.2f}); {tune['verdict']}"]


def main(argv: list[str] | None = None) -> int:
    """Command line: one part (``gemm``, ``gpt``) or the ``summary``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    for name in ("gemm", "gpt"):
        sub = parts.add_parser(name)
        sub.add_argument("--out", required=True, type=Path, help="folder for the part's JSON")
        sub.add_argument("--tiny", action="store_true", help="tiny sizes on whatever device: checks the script")
        if name == "gpt":
            sub.add_argument("--batch", type=int, default=None, help="sequences a step (default: probed)")
    summary = parts.add_parser("summary")
    summary.add_argument("out", type=Path, help="the full stage's folder")
    args = parser.parse_args(argv)
    if args.part == "summary":
        return summarize(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        print("no CUDA GPU here: run with --tiny to check the script on a CPU", file=sys.stderr)
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    if args.part == "gemm":
        return run_gemm(args.out, args.tiny, device)
    return run_gpt(args.out, args.tiny, device, args.batch)


if __name__ == "__main__":
    sys.exit(main())
