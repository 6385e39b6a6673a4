"""Tune on slow steps: what `torchboost tune` measures, keeps and verifies within its budget.

    python benchmarks/tune_slow_steps.py [--budgets 300,600] [--busy no,yes] [--grid] [--remeasure 3]
                                         [--shape gpt_char_full]

The script is nanoGPT's shakespeare_char transformer at its own width (``shapes/gpt_char_full.py``:
6 x 384, 256 tokens, batch 8: about a second a step on 2 cores), run for ``--run-steps``.
For each budget, alone and beside a CPU-heavy loop (``--busy yes``: a matmul loop of
``--busy-threads`` threads, 1 by default, in another process, started before tune and ended
after it), it runs

    torchboost tune --budget B -- python gpt_char_full.py --steps N

in a scratch folder and prints what was measured first and when, what was kept, the
end-to-end verdict, and the command's wall time against the budget.

``--grid``: each configuration of the levers that matter on this shape (bf16 autocast, bf16
math in fp32 matmuls, the fused optimizer, torch.compile, and bf16 with compile), measured
with tune's own trial runner, one after another, quiet: its time per step, its compile,
the planned run's time, and the grid's own wall time, for comparison with tune's.

``--remeasure K``: the first quiet tune's torchboost.toml, re-measured independently:
``python gpt_char_full.py`` against ``torchboost run -- python gpt_char_full.py``, K
alternating pairs of whole runs of ``--remeasure-steps`` steps, timed from outside.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import timed_beside

HERE = Path(__file__).resolve().parent
BUSY_LOOP = ("import torch\ntorch.set_num_threads({threads})\na = torch.randn(768, 768)\n"
             "while True:\n    a = torch.tanh(a @ a)\n")
GRID = {"baseline": {}, "bf16": {"precision.mode": "bf16"}, "fp32_math bf16": {"fp32_math.mode": "bf16"},
        "fused AdamW": {"optimizer.implementation": "fused"}, "compile": {"compile.mode": "default"},
        "bf16 + compile": {"precision.mode": "bf16", "compile.mode": "default"}}


def cpu_line() -> str:
    """The CPU model and its bf16 flags, as lscpu gives them."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return (f"{fields.get('Model name', '?').strip()} (family {fields.get('CPU family', '?').strip()}, model "
            f"{fields.get('Model', '?').strip()}), {os.cpu_count()} cores, flags: {' '.join(wanted)}")


def tune_once(script: Path, budget: int, busy: bool, run_steps: int, keep: Path | None,
              busy_threads: int = 1) -> dict[str, Any]:
    """One `torchboost tune` in a scratch folder: its report's figures and its wall time."""
    with tempfile.TemporaryDirectory(prefix="tune-slow-") as tmp:
        work = Path(tmp)
        # the loop at full speed (2 s) before tune starts
        proc, wall = timed_beside([sys.executable, "-m", "torchboost.cli", "tune", "--budget", str(budget),
                                   "--out", str(work / "out"), "--config", str(work / "torchboost.toml"), "--",
                                   sys.executable, str(script), "--steps", str(run_steps)],
                                  cwd=work, loop=BUSY_LOOP.format(threads=busy_threads) if busy else None, settle_s=2.0)
        report_path = work / "out" / "report.json"
        if proc.returncode not in (0, 3, 4) or not report_path.is_file():  # 3: no proven win, 4: unverified
            return {"budget": budget, "busy": busy, "wall_s": wall, "error": proc.stderr[-800:]}
        if keep is not None and (work / "torchboost.toml").is_file():
            shutil.copy(work / "torchboost.toml", keep)
        return {"budget": budget, "busy": busy, "wall_s": wall, **_summary(json.loads(report_path.read_text()))}


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    decisions = report.get("decisions", [])
    trials = report.get("trials") or {}
    e2e = report.get("end_to_end") or {}
    return {
        "decisions": [f"{d.get('status')} {d.get('subject') or d.get('lever')}: {d.get('reason', '')[:140]}"
                      for d in decisions],
        "kept": [d.get("subject") or d.get("lever") for d in decisions if d.get("status") == "kept"],
        "trials": trials, "warnings": report.get("warnings", []), "verdict": report.get("verdict", ""),
        "end_to_end": {k: e2e.get(k) for k in ("baseline_s", "tuned_s", "pairs", "speedup") if k in e2e},
        "elapsed_s": report.get("elapsed_s"),
        "unverified": report.get("unverified"),
        "spent_s": {k: round(v) for k, v in (report.get("spent_s") or {}).items()},
    }


def grid(script: Path, run_steps: int, trial_steps: int) -> list[dict[str, Any]]:
    """Each configuration of :data:`GRID`, one trial each with tune's runner, quiet."""
    from torchboost.tune.trials.trial import TrialRequest, run_trial

    rows = []
    for name, overlay in GRID.items():
        with tempfile.TemporaryDirectory(prefix="grid-") as tmp:
            here = os.getcwd()
            os.chdir(tmp)  # the trial guards its working directory: a scratch one, not this checkout
            try:
                result = run_trial(TrialRequest(
                    command=[sys.executable, str(script), "--steps", str(run_steps)], settings=overlay, repeat=0,
                    steps=trial_steps, warmup=3, out_dir=Path(tmp) / "out", timeout_s=900))
            finally:
                os.chdir(here)
        planned = result.compile_s + run_steps * result.ms_per_step / 1e3 if result.ok else float("inf")
        rows.append({"config": name, "ok": result.ok, "error": result.error, "ms_per_step": result.ms_per_step,
                     "compile_s": result.compile_s, "planned_run_s": planned, "wall_s": result.wall_s})
        print(f"  grid {name:16s} {result.ms_per_step:8.1f} ms/step  compile {result.compile_s:5.1f} s  "
              f"planned run {planned:7.1f} s  (trial {result.wall_s:.0f} s)", flush=True)
    return rows


def remeasure(script: Path, config: Path, pairs: int, steps: int) -> dict[str, Any]:
    """Plain python against `torchboost run` with ``config``, alternating, whole runs timed from outside."""
    plain, tuned = [], []
    with tempfile.TemporaryDirectory(prefix="remeasure-") as tmp:
        shutil.copy(config, Path(tmp) / "torchboost.toml")
        command = [sys.executable, str(script), "--steps", str(steps)]
        for _ in range(pairs):
            for times, argv in ((plain, command), (tuned, [sys.executable, "-m", "torchboost.cli", "run", "--", *command])):
                start = time.perf_counter()
                subprocess.run(argv, cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times.append(time.perf_counter() - start)
    ratios = [p / t for p, t in zip(plain, tuned)]
    return {"plain_s": plain, "tuned_s": tuned, "speedup": statistics.median(ratios), "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", default="300,600")
    parser.add_argument("--busy", default="no,yes", help="no, yes or both (no,yes)")
    parser.add_argument("--run-steps", type=int, default=2000)
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--grid-steps", type=int, default=10)
    parser.add_argument("--remeasure", type=int, default=0, metavar="PAIRS")
    parser.add_argument("--remeasure-steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None, help="write every figure as JSON here too")
    parser.add_argument("--shape", default="gpt_char_full", help="the script of shapes/ to tune (default gpt_char_full)")
    parser.add_argument("--busy-threads", type=int, default=1, help="threads of the busy loop (default 1)")
    args = parser.parse_args()
    script = HERE / "shapes" / f"{args.shape}.py"
    print(f"CPU: {cpu_line()}; Python {platform.python_version()}; load before: {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, Any] = {"cpu": cpu_line(), "tunes": []}
    keep = Path(tempfile.mkdtemp(prefix="tuned-")) / "torchboost.toml"
    for busy in [b.strip() == "yes" for b in args.busy.split(",")]:
        for budget in [int(b) for b in args.budgets.split(",")]:
            row = tune_once(script, budget, busy, args.run_steps, keep if not busy and not keep.exists() else None,
                            args.busy_threads)
            results["tunes"].append(row)
            print(json.dumps(row, indent=1), flush=True)
    if args.grid:
        start = time.perf_counter()
        results["grid"] = grid(script, args.run_steps, args.grid_steps)
        results["grid_wall_s"] = time.perf_counter() - start
        best = min(results["grid"], key=lambda r: r["planned_run_s"])
        print(f"grid: best {best['config']} ({best['planned_run_s']:.0f} s planned run), "
              f"grid wall {results['grid_wall_s']:.0f} s", flush=True)
    if args.remeasure and keep.exists():
        results["remeasure"] = remeasure(script, keep, args.remeasure, args.remeasure_steps)
        print("remeasure:", json.dumps(results["remeasure"]), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
