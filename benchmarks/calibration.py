"""Calibration: each switchable finding's estimate, its quick probe and a direct measurement.

    python benchmarks/calibration.py [--pairs 5] [--only gpt,gpt_char,...]

For every built-in workload (``--size tiny``) and three real shapes (``benchmarks/shapes/``:
nanoGPT's shakespeare_char scaled down, an LSTM language model, a small CNN) it runs
``torchboost doctor`` on the unmodified script and reads each finding's estimate and its
quick probe's ratio from report.json; then it times the same switch itself, in this one
process, on the same model and batches: after one warm-up pair, ``--pairs`` pairs of a plain
step and a switched step, interleaved, the median of the per-pair ratios ("direct"). A
switch whose finding the doctor did not raise is measured too, so the table shows what
the doctor left out. It also prints each doctor run's wall time and its probes' share, the
CPU model, its bf16 flags and the machine's load.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader

from torchboost.techniques.registry import ProbeContext, techniques

HERE = Path(__file__).resolve().parent
SHAPES = ("gpt_char", "lstm_lm", "small_cnn")
WORKLOADS = ("gpt", "vision", "mlp", "data")


def _command(name: str) -> list[str]:
    if name in SHAPES:
        return [sys.executable, str(HERE / "shapes" / f"{name}.py"), "--steps", "400"]
    return [sys.executable, "-m", f"torchboost.workloads.{name}", "--size", "tiny", "--steps", "400"]


def _doctor(name: str) -> tuple[dict[str, Any], float]:
    """report.json of the doctor on ``name``, and the doctor's wall time, seconds."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--json", "--out", out, "--",
                        *_command(name)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=out)
        wall = time.perf_counter() - start
        return json.loads((Path(out) / "report.json").read_text()), wall


def _shape(name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, list[Any], Callable[..., Any]]:
    """The model, optimizer, a few batches and the loss of ``name``, built in this process."""
    if name in SHAPES:
        spec = importlib.util.spec_from_file_location(name, HERE / "shapes" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(HERE / "shapes"))
        spec.loader.exec_module(module)
        model, optimizer, batches = module.build()
        return model, optimizer, batches, module.loss
    from torchboost.workloads import REGISTRY

    torch.manual_seed(0)
    work = REGISTRY[name].build("tiny")
    loader = DataLoader(work.dataset, batch_size=work.batch_size, collate_fn=work.collate_fn, shuffle=True)
    batches = list(itertools.islice(iter(loader), 4))
    return (work.model, work.make_optimizer(work.model.parameters()), batches,
            lambda model, x, y: work.loss_fn(model(x), y))


def _direct(name: str, pairs: int) -> dict[str, float]:
    """finding id -> median over ``pairs`` interleaved pairs of plain ms / switched ms."""
    model, optimizer, batches, loss_of = _shape(name)
    model.train()
    cycle = itertools.cycle(batches)
    ctx = ProbeContext(model=model, optimizer=optimizer, loader=None, device="cpu")
    switches = [s for s in (t.quick_probe(ctx) for t in techniques() if t.quick_probe) if s is not None]

    def step() -> float:
        x, y = next(cycle)
        start = time.perf_counter()
        loss_of(model, x, y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return (time.perf_counter() - start) * 1000.0

    def switched() -> float:
        switch.on()
        try:
            return step()
        finally:
            switch.off()

    out = {}
    step()  # first calls
    for switch in switches:
        step(), switched()  # the switch's first calls
        out[switch.finding_id] = statistics.median(step() / switched() for _ in range(pairs))
    return out


def _probe_share(report: dict[str, Any], wall_s: float) -> float:
    probes = report["facts"].get("quick_probes") or []
    ms = sum(sum(p["plain_ms"]) + sum(p["switched_ms"]) + (p["warmup_ms"] or 0.0) for p in probes)
    return ms / 1000.0 / wall_s


def _rows(name: str, pairs: int) -> list[str]:
    report, wall = _doctor(name)
    direct = _direct(name, pairs)
    findings = {f["id"]: f for f in report["findings"]}
    probes = {p["finding_id"]: p for p in report["facts"].get("quick_probes") or []}
    rows = []
    for fid, ratio in direct.items():
        f, probe = findings.get(fid), probes.get(fid)
        estimate = f"x{f['expected_speedup']:.2f}" if f else "no finding"
        measured = (f"x{f['measured']['ratio']:.2f} ({f['measured']['steps']} steps)" if f and f.get("measured")
                    else (probe["error"] or "-").split(":")[0] if probe else "-")
        gap = (f"{100 * (f['measured']['ratio'] / ratio - 1):+.0f}%" if f and f.get("measured") else "")
        rows.append(f"| {name} | {fid} | {estimate} | {measured} | x{ratio:.2f} | {gap} |")
    rows.append(f"| {name} | (doctor run) | {wall:.1f} s | probes {100 * _probe_share(report, wall):.0f}% of it | "
                f"median step {report['step_time_ms']['median']:.0f} ms | |")
    return rows


def _machine() -> list[str]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), [])
    bf16 = sorted(f for f in flags if "bf16" in f or f.startswith("amx"))
    return [f"CPU: {model}; bf16 flags: {' '.join(bf16) or 'none'}; {os.cpu_count()} cores; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads; load {os.getloadavg()[0]:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--only", default=",".join(WORKLOADS + SHAPES))
    args = parser.parse_args()
    print(*_machine(), sep="\n")
    print("| script | finding | estimate | quick probe | direct | probe vs direct |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.only.split(","):
        for row in _rows(name, args.pairs):
            print(row, flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
