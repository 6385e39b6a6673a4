"""Is what `torchboost tune` claims what the user gets? And what does `torchboost run` cost?

    python benchmarks/claims.py [--targets vision,mlp,data,gpt,image] [--budget 120] [--pairs 5]
        [--run-cost-pairs 7] [--out claims.json]

For each target (a built-in workload run as a plain script, or ``image``: the loader-bound
image script ``benchmarks/scripts/image_loader.py``, 3 epochs), ``torchboost tune`` runs
with its end-to-end check, and its claim (``report.json``'s headline speedup) is then
re-measured independently: ``python SCRIPT`` against ``torchboost run --config TUNED --
python SCRIPT``, whole processes timed with ``time.perf_counter``, in pairs whose order
alternates (A B, B A, ...: a drift of the machine or a warming cache favours neither side),
median of the pair ratios. Each row says whether the re-measure lies inside the claim's
interval (``report.json["end_to_end"]["interval"]``) and within 10% of the claim; where
tune kept nothing the claim is 1.0 with no interval, and only the 10% applies. Last, ``torchboost run``'s own cost: a short script under
``python`` and under ``torchboost run`` with nothing to apply, interleaved. Prints a table
and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torchboost import BoostConfig
from torchboost.cli.tune import NO_PROVEN_WIN, UNVERIFIED

_HERE = Path(__file__).resolve().parent
WORKLOAD_STEPS = {"vision": 400, "mlp": 2000, "data": 400, "gpt": 200, "image": 3 * 64}
"""Each target's whole run in steps, given to tune as --run-steps (the user knows it)."""
TINY = "import torch\nx = torch.randn(64, 64)\nfor _ in range(10):\n    x = x @ x / 64\n"


def target_command(name: str) -> list[str]:
    """The plain script the user runs for ``name``."""
    if name == "image":
        return ["python", str(_HERE / "scripts" / "image_loader.py"), "--epochs", "3"]
    return ["python", "-m", f"torchboost.workloads.{name}", "--size", "tiny", "--steps", str(WORKLOAD_STEPS[name])]


def _python(command: list[str]) -> list[str]:
    return [sys.executable, *command[1:]] if command[0] == "python" else command


def _timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    # Output to files, not pipes: a pipe's reader waits for every process holding it, and
    # torch's shared-memory manager (file_system hand-over) keeps it open after the script
    # exits; a shell's `time python train.py` waits for the script alone.
    with tempfile.TemporaryFile() as err:
        done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {err.read()[-800:].decode()}")
    return seconds


def _pairs(a: list[str], b: list[str], pairs: int, cwd: Path) -> tuple[list[float], list[float]]:
    """A B, B A, A B, ...: whole-process seconds of each."""
    times_a, times_b = [], []
    for index in range(pairs):
        if index % 2:
            times_b.append(_timed(b, cwd))
            times_a.append(_timed(a, cwd))
        else:
            times_a.append(_timed(a, cwd))
            times_b.append(_timed(b, cwd))
    return times_a, times_b


def _tune(name: str, budget: float, work: Path) -> dict:
    out, config = work / f"{name}-tune", work / f"{name}.toml"
    argv = [sys.executable, "-m", "torchboost.cli", "tune", "--budget", str(budget), "--out", str(out),
            "--config", str(config), "--run-steps", str(WORKLOAD_STEPS[name]), "--", *target_command(name)]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True)
    if done.returncode not in (0, NO_PROVEN_WIN, UNVERIFIED):  # no change proven faster, or unverified: results
        raise RuntimeError(f"tune {name} failed: {done.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {"report": report, "config": config, "tune_s": time.perf_counter() - start}


def claim_vs_remeasure(name: str, budget: float, pairs: int, work: Path) -> dict:
    """The tuner's headline against an independent interleaved re-measure of what it wrote."""
    tuned = _tune(name, budget, work)
    report = tuned["report"]
    plain = _python(target_command(name))
    # What the user runs next: the file tune wrote, or the one it wrote apart when unverified;
    # where it kept nothing, the plain command itself (the claim is 1.0, nothing to re-measure).
    config = tuned["config"] if tuned["config"].exists() else Path((report.get("unverified") or {}).get("path", ""))
    config = config if config.is_absolute() else work / config
    if config.is_file():
        applied = [sys.executable, "-m", "torchboost.cli", "run", "--config", str(config), "--",
                   *target_command(name)]
        base_s, run_s = _pairs(plain, applied, pairs, work)
        remeasured = 1.0 / statistics.median([r / b for b, r in zip(base_s, run_s)])
    else:
        base_s, run_s, remeasured = [], [], 1.0
    e2e = report.get("end_to_end") or {}
    interval = e2e.get("interval") if report["status"] != "unchanged" else None
    return {
        "target": name, "status": report["status"], "settings": report["settings"],
        "claim": report["speedup"], "search_speedup": report["search_speedup"],
        "claim_steps": e2e.get("steps"), "claim_pairs": e2e.get("pairs"), "noise": report["noise"]["floor"], "warnings": report["warnings"],
        "remeasured": remeasured, "plain_s": base_s, "run_s": run_s, "tune_s": tuned["tune_s"],
        "claim_over_remeasured": report["speedup"] / remeasured, "interval": interval,
        "inside_interval": None if not interval else interval[0] <= remeasured <= interval[1],
        "within_10pct": abs(remeasured / report["speedup"] - 1.0) <= 0.10,
    }


def _row_words(row: dict) -> str:
    interval = (f"{row['interval'][0]:.3f}-{row['interval'][1]:.3f}, {row['claim_pairs']} pairs"
                if row["interval"] else "none")
    inside = {None: "n/a", True: "yes", False: "NO"}[row["inside_interval"]]
    return (f"{row['target']:7} {row['status']:9} claim {row['claim']:.3f} [{interval}]  re-measured "
            f"{row['remeasured']:.3f}  inside {inside}  within 10% {'yes' if row['within_10pct'] else 'NO'}  "
            f"(search per step {row['search_speedup']:.3f}; noise {row['noise']:.3f}; tune {row['tune_s']:.0f} s)\n"
            f"        kept: {', '.join(f'{k}={v}' for k, v in row['settings'].items()) or 'nothing'}")


def run_cost(pairs: int, work: Path) -> dict:
    """`torchboost run` with nothing to apply against plain python, on a short script."""
    script = work / "tiny.py"
    script.write_text(TINY, encoding="utf-8")
    config = work / "off.toml"
    BoostConfig.off().to_toml(config)
    plain = [sys.executable, str(script)]
    applied = [sys.executable, "-m", "torchboost.cli", "run", "--config", str(config), "--", "python", str(script)]
    base_s, run_s = _pairs(plain, applied, pairs, work)
    return {"python_s": statistics.median(base_s), "torchboost_run_s": statistics.median(run_s),
            "cost_s": statistics.median([r - b for b, r in zip(base_s, run_s)]), "pairs": pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="vision,mlp,data,gpt,image")
    parser.add_argument("--budget", type=float, default=120.0, help="tune's --budget per target (seconds)")
    parser.add_argument("--pairs", type=int, default=5, help="alternating pairs of the re-measure")
    parser.add_argument("--run-cost-pairs", type=int, default=7)
    parser.add_argument("--out", default="claims.json")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="torchboost-claims-") as tmp:
        work = Path(tmp)
        cost = run_cost(args.run_cost_pairs, work)
        for name in args.targets.split(","):
            rows.append(claim_vs_remeasure(name, args.budget, args.pairs, work))
            print(_row_words(rows[-1]), flush=True)
    held = all(r["within_10pct"] and r["inside_interval"] is not False for r in rows)
    print(f"\nevery re-measure inside its claim's interval and within 10% of the claim: {'yes' if held else 'NO'}")
    print(f"\ntorchboost run costs {cost['cost_s']:.3f} s over python (median of {cost['pairs']} pairs: "
          f"{cost['python_s']:.3f} s -> {cost['torchboost_run_s']:.3f} s)")
    Path(args.out).write_text(json.dumps({"rows": rows, "run_cost": cost}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
