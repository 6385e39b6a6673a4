"""Exhaustive grid over the tuner's levers, against `torchboost tune` on the same script.

    python benchmarks/grid.py --workloads vision,mlp [--run-steps 400] [--out grid.json]

For each workload this first runs `torchboost tune` on the script, then measures every
combination of the levers the tuner pulls (loader workers x intra-op threads x prefetch x
batch hand-over, bf16 autocast, fused or foreach optimizer, torch.compile; with
``--booster``, the workload's Booster loop and channels_last for conv models) with the
tuner's own trial runner and the trial length tune chose (each finished trial journalled,
so a rerun resumes). It keeps the combinations whose losses pass the tuner's parity
check and ranks them by the time of the planned run: compile seconds + run steps x time
per step (the mean of the measured steps). Last, the tuner's pick against the grid's
best in interleaved pairs (A B A B ...), so the final ratio compares runs made next to
each other. The table gives both times and both wall-clock costs: the tuner should land
within 5% of the grid's best for at most 10% of the grid's time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from torchboost.env import probe
from torchboost.plan import Plan, changed_settings
from torchboost.cli.tune import NO_PROVEN_WIN, UNVERIFIED
from torchboost.config import BoostConfig
from torchboost.tune.search.parity import EXACT, REDUCED, STATISTICAL, check_parity
from torchboost.tune.trials.journal import Journal
from torchboost.tune.trials.trial import TrialRequest, run_trial
from torchboost.tune.trials.trial_result import TrialResult, describe_settings
from torchboost.techniques.memory import has_conv2d
from torchboost.workloads import REGISTRY


def grid_settings(cores: int, max_workers: int = 4, *, prefetch: bool = True, sharing: bool = True,
                  optimizers: tuple[str, ...] = ("default", "fused", "foreach"),
                  channels_last: bool = False) -> list[dict[str, Any]]:
    """Every combination of the levers tune proposes on a CPU (the baseline is the empty one)."""
    hosts: list[dict[str, Any]] = [{}] + [{"cpu.threads": t} for t in sorted({1, cores // 2}) if 0 < t < cores]
    worker_options = [{}]
    if prefetch:
        worker_options = [{**w, **p} for w in worker_options for p in ({}, {"loader.prefetch_factor": 4})]
    if sharing:
        worker_options = [{**w, **s} for w in worker_options
                          for s in ({}, {"loader.sharing_strategy": "file_system"})]
    for workers in range(1, min(max_workers, cores) + 1):
        for threads in sorted({max(1, cores - workers), cores}):
            host = {"loader.num_workers": workers, "loader.persistent_workers": True, "cpu.threads": threads}
            hosts += [{**host, **option} for option in worker_options]
    precisions = [{}, {"precision.mode": "bf16"}]
    optimizers = [{} if o == "default" else {"optimizer.implementation": o} for o in optimizers]
    compiles = [{}, {"compile.mode": "default"}]
    layouts = [{}, {"memory.channels_last": True}] if channels_last else [{}]
    return [{**h, **p, **o, **c, **m}
            for h, p, o, c, m in itertools.product(hosts, precisions, optimizers, compiles, layouts)]


def _parity_ok(baseline: TrialResult, result: TrialResult, settings: dict[str, Any]) -> tuple[bool, str]:
    kind = REDUCED if settings.get("precision.mode") == "bf16" else EXACT
    verdict = check_parity(baseline.losses, result.losses, kind=kind)
    if not verdict.ok and kind == EXACT and "loader.num_workers" in settings:
        verdict = check_parity(baseline.losses, result.losses, kind=STATISTICAL)
    return verdict.ok, verdict.detail


def _run_time_s(result: TrialResult, run_steps: int) -> float:
    return result.compile_s + run_steps * result.ms_per_step / 1e3  # ms_per_step: mean, as throughput


def _settings_of(config: BoostConfig, booster: bool) -> dict[str, Any]:
    # A Booster script takes every change; an unmodified one what can be applied from outside.
    return changed_settings(config)[0] if booster else Plan.of(config).apply


def _tune(command: list[str], run_steps: int, budget: float, tmp: Path, trial: list[str],
          booster: bool) -> tuple[dict, float, int]:
    """Tune's pick, its wall time and the measured steps per trial it chose."""
    config = tmp / "tuned.toml"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--out", str(tmp / "tune"), "--config",
                           str(config), "--budget", str(budget), "--run-steps", str(run_steps), *trial, "--",
                           *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if done.returncode not in (0, NO_PROVEN_WIN, UNVERIFIED):  # no change proven faster, or unverified: results
        raise subprocess.CalledProcessError(done.returncode, done.args)
    elapsed = time.monotonic() - start
    steps = json.loads((tmp / "tune" / "outcome.json").read_text(encoding="utf-8"))["steps_per_trial"]
    return _settings_of(BoostConfig.from_toml(config), booster), elapsed, int(steps)


def run_workload(name: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Grid, tune and the final A/B for one built-in workload."""
    command = [sys.executable, "-m", f"torchboost.workloads.{name}", "--steps", str(args.run_steps),
               *(["--booster"] if args.booster else [])]
    conv = has_conv2d(REGISTRY[name].build("tiny").model)
    with tempfile.TemporaryDirectory(prefix="torchboost-grid-") as tmp_name:
        tmp = Path(tmp_name)
        # Tune first: the grid then measures every combination with the trial length tune
        # chose for this script (its "auto"), so both rank by the same kind of run.
        tuned, tune_s, steps = _tune(command[1:], args.run_steps, args.tune_budget, tmp,
                                     ["--steps-per-trial", args.steps_per_trial, "--warmup", str(args.warmup)],
                                     args.booster)
        trial_steps = dict(steps=steps, warmup=args.warmup, timeout_s=600)
        combos = grid_settings(probe().cpu_cores, prefetch=args.prefetch, sharing=args.sharing,
                               optimizers=tuple(args.optimizers.split(",")), channels_last=args.booster and conv)
        start = time.monotonic()
        results: list[tuple[dict[str, Any], TrialResult]] = []
        journal_name = f"grid-{name}{'-booster' if args.booster else ''}-{steps}steps.jsonl"
        journal = Journal(Path(args.journal_dir) / journal_name, resume=True)

        def measure(settings: dict[str, Any], repeat: int) -> TrialResult:
            # Every finished trial is journalled: a crash or Ctrl-C loses at most one.
            recorded = journal.lookup(settings, repeat)
            if recorded is None:
                recorded = run_trial(TrialRequest(command=command, settings=settings, repeat=repeat,
                                                  out_dir=tmp / "trial", **trial_steps))
                journal.append(recorded)
            return recorded

        for i, settings in enumerate(combos, 1):
            result = measure(settings, 0)
            results.append((settings, result))
            console.print(f"  {name} grid {i}/{len(combos)}: {describe_settings(settings)}: "
                          f"{result.ms_per_step:.2f} ms/step", highlight=False)
        grid_s = time.monotonic() - start
        baseline = results[0][1]
        ranked = []
        for settings, result in results:
            ok, detail = _parity_ok(baseline, result, settings) if result.ok else (False, result.error or "")
            if ok:
                ranked.append((_run_time_s(result, args.run_steps), settings, result))
        ranked.sort(key=lambda item: item[0])
        grid_best = ranked[0][1]

        # Final interleaved pairs: tune's pick vs the grid's best, planned-run time each.
        ratios = []
        for repeat in range(1, args.pairs + 1):
            a = measure(grid_best, repeat)
            b = run_trial(TrialRequest(command=command, settings=tuned, repeat=repeat, out_dir=tmp / "trial",
                                       **trial_steps))
            ratios.append(_run_time_s(b, args.run_steps) / _run_time_s(a, args.run_steps))
        return {
            "workload": name,
            "run_steps": args.run_steps,
            "combinations": len(combos),
            "steps_per_trial": steps,
            "correct_combinations": len(ranked),
            "grid_seconds": grid_s,
            "grid_best": grid_best,
            "grid_best_run_s": ranked[0][0],
            "baseline_run_s": _run_time_s(baseline, args.run_steps),
            "tuned": tuned,
            "tune_seconds": tune_s,
            "tuned_vs_grid_best_ratios": ratios,
            "tuned_vs_grid_best": statistics.median(ratios),
            "top5": [{"settings": s, "run_s": t} for t, s, _ in ranked[:5]],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="vision,mlp")
    parser.add_argument("--run-steps", type=int, default=400, help="planned run length (compile amortised)")
    parser.add_argument("--steps-per-trial", default="auto", help="measured steps per trial (default: tune's auto)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--tune-budget", type=float, default=300.0)
    parser.add_argument("--pairs", type=int, default=3, help="final A/B pairs, tune's pick vs the grid's best")
    parser.add_argument("--out", default="grid.json")
    parser.add_argument("--no-prefetch", dest="prefetch", action="store_false",
                        help="leave the prefetch_factor=4 variants out (halves the loader combinations)")
    parser.add_argument("--no-sharing", dest="sharing", action="store_false",
                        help="leave the file_system hand-over variants out")
    parser.add_argument("--optimizers", default="default,fused,foreach", help="optimizer kernels in the grid")
    parser.add_argument("--booster", action="store_true",
                        help="grid and tune the workloads' Booster loop (adds channels_last for conv models)")
    parser.add_argument("--journal-dir", default="grid-journal",
                        help="finished trials, one JSONL file per workload; a rerun reuses them")
    args = parser.parse_args(argv)
    console = Console()
    rows = [run_workload(name, args, console) for name in args.workloads.split(",")]
    Path(args.out).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    table = Table(title=f"Grid vs tune (planned run {args.run_steps} steps; time = compile + steps x time per step)")
    for col in ("workload", "grid best", "tune's pick", "tune / grid best (median of pairs)",
                "grid: combos, wall s", "tune wall s", "tune time / grid time"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["workload"], describe_settings(r["grid_best"]), describe_settings(r["tuned"]),
            f"{r['tuned_vs_grid_best']:.3f} ({', '.join(f'{x:.3f}' for x in r['tuned_vs_grid_best_ratios'])})",
            f"{r['combinations']}, {r['grid_seconds']:.0f}", f"{r['tune_seconds']:.0f}",
            f"{r['tune_seconds'] / r['grid_seconds']:.1%}",
        )
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
