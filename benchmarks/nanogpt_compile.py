"""torch.compile on nanoGPT's train.py (CPU): compile seconds cold and warm, compiled
against eager step time, break-even steps, the doctor on a cold compile, and tune's verdict.

    python benchmarks/nanogpt_compile.py NANOGPT_DIR [--iters 400] [--tune-budget 300]

``NANOGPT_DIR`` is a checkout of karpathy/nanoGPT whose ``data/shakespeare_char`` has been
prepared (any text as ``input.txt``, then its ``prepare.py``). Every run is a whole
process, timed with its own clock; the step times are the ones nanoGPT prints
("iter N: ... time X ms"), the median over iterations 10 and later. "Cold" runs get an
empty ``TORCHINDUCTOR_CACHE_DIR``; "warm" runs reuse the cold run's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARGS = ["config/train_shakespeare_char.py", "--device=cpu", "--block_size=64", "--batch_size=12", "--n_layer=4",
        "--n_head=4", "--n_embd=128", "--dropout=0.0", "--eval_interval=1000", "--eval_iters=5",
        "--always_save_checkpoint=False", "--log_interval=1"]
_ITER = re.compile(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms")


def train_args(iters: int, compiled: bool) -> list[str]:
    """nanoGPT's train.py arguments of the issue's CPU configuration."""
    return ["train.py", *ARGS, f"--compile={compiled}", f"--max_iters={iters}", f"--lr_decay_iters={iters}"]


def timed(argv: list[str], cwd: Path, cache: Path) -> dict:
    """Run ``argv``; wall seconds, exit code, first iteration and median later iteration (ms)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    iters = {int(n): float(ms) for n, ms in _ITER.findall(proc.stdout)}
    later = [ms for n, ms in iters.items() if n >= 10]
    return {"wall_s": round(wall, 1), "exit": proc.returncode, "iter0_ms": iters.get(0),
            "step_ms": round(statistics.median(later), 1) if later else None, "tail": proc.stderr[-1500:]}


def doctor(cwd: Path, iters: int, cache: Path, out: Path) -> dict:
    """``torchboost doctor`` with default options on the compiled script, cold cache."""
    run = timed([sys.executable, "-m", "torchboost.cli", "doctor", "--out", str(out), "--", "python",
                 *train_args(iters, True)], cwd, cache)
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
    section = report.get("compile") or {}
    return {"exit": run["exit"], "wall_s": run["wall_s"], "steps": report.get("steps_observed"),
            "compile_s": section.get("compile_s"), "cache": section.get("cache"),
            "first_step_ms": section.get("first_step_ms"), "step_ms": section.get("step_ms"),
            "graph_breaks": len(section.get("graph_breaks", [])), "recompiles": len(section.get("recompiles", []))}


def tune(cwd: Path, iters: int, budget: int, out: Path) -> dict:
    """``torchboost tune`` on the eager script; its compile decision and end-to-end figure."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--budget", str(budget), "--out", str(out),
                           "--config", str(out / "torchboost.toml"), "--", "python", *train_args(iters, False)],
                          cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - start
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
    compile_ = [d for d in report.get("decisions", []) if d.get("lever") == "compile"]
    return {"exit": proc.returncode, "wall_s": round(wall, 1), "run_steps": report.get("run_steps"),
            "compile": [(d.get("status"), d.get("reason")) for d in compile_],
            "end_to_end": report.get("end_to_end"), "tail": proc.stderr[-800:] if proc.returncode else ""}


def break_even(extra_ms: float | None, eager_ms: float | None, compiled_ms: float | None) -> int | None:
    """Steps after which a compile's one-off cost is repaid by its faster steps."""
    if None in (extra_ms, eager_ms, compiled_ms) or eager_ms <= compiled_ms:
        return None
    return int(extra_ms / (eager_ms - compiled_ms)) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nanogpt", type=Path)
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--tune-budget", type=int, default=300)
    parser.add_argument("--skip-tune", action="store_true")
    args = parser.parse_args()
    cwd, py = args.nanogpt.resolve(), sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        eager = timed([py, *train_args(args.iters, False)], cwd, root / "eager-cache")
        cold = timed([py, *train_args(args.iters, True)], cwd, root / "cache")
        warm = timed([py, *train_args(args.iters, True)], cwd, root / "cache")
        doc = doctor(cwd, args.iters, root / "doctor-cache", root / "doctor")
        tuned = None if args.skip_tune else tune(cwd, args.iters, args.tune_budget, root / "tune")
    rows = {"eager": eager, "compiled, cold cache": cold, "compiled, warm cache": warm}
    for name, row in rows.items():
        print(f"{name:22} exit {row['exit']}  wall {row['wall_s']:7.1f} s  iter 0 {row['iter0_ms'] or 0:9.1f} ms  "
              f"step {row['step_ms']} ms")
    for name, row in (("cold", cold), ("warm", warm)):
        extra = row["iter0_ms"] - eager["iter0_ms"] if row["iter0_ms"] and eager["iter0_ms"] else None
        print(f"break-even ({name}): {break_even(extra, eager['step_ms'], row['step_ms'])} steps "
              f"(iter 0 {extra and extra / 1000:.1f} s over eager's)")
    print("doctor (cold, default options):", json.dumps(doc))
    if tuned is not None:
        print("tune:", json.dumps(tuned, indent=1))


if __name__ == "__main__":
    main()
