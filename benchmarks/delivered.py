"""What tune delivers against what is available: its pick against the best of a full grid.

    python benchmarks/delivered.py [--targets demo,image,gpt,gpt-busy] [--rounds 3]
                                   [--journal-dir delivered-journal] [--out delivered.json]

For each target script, in a scratch folder:

1. ``torchboost tune --budget B`` as a user runs it (the demo's command and budget for
   ``demo``), timed from outside: its wall time, what it kept, the speedup it claims.
2. A full grid of the same levers: every combination of the options tune's levers propose
   on this machine for that script (loader workers x threads x hand-over, bf16 autocast,
   bf16 math in fp32 matmuls, the optimizer kernel, and torch.compile where the planned
   run can repay it), one trial each with tune's own trial runner and trial length, kept
   when its losses pass tune's parity check, ranked by the planned run's time (compile +
   planned steps x time per step). Each finished trial is journalled: a rerun resumes.
3. What the user gets, measured the same way for both: the plain command, tune's file and
   the grid's best through ``torchboost run``, in ``--rounds`` rounds of the three (the
   order rotating), timed from outside as whole processes (the target's own run, or the
   first ``--measure-steps`` steps of a slow one).

``gpt-busy`` runs all three stages beside a one-thread matmul loop in another process.
The table gives tune's speedup over the grid best's (delivered over available) and tune's
wall time over the grid's (its trials and nothing else). Target: within 5% in a tenth of
the time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console
from rich.table import Table

from torchboost.cli.tune import NO_PROVEN_WIN, UNVERIFIED
from torchboost.tune.trials.journal import Journal
from torchboost.tune.search.parity import EXACT, REDUCED, STATISTICAL, check_parity
from torchboost.tune.trials.trial import TrialRequest, run_trial
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

HERE = Path(__file__).resolve().parent
BUSY_LOOP = "import torch\ntorch.set_num_threads(1)\na = torch.randn(768, 768)\nwhile True:\n    a = torch.tanh(a @ a)\n"


@dataclass(frozen=True)
class Target:
    """A script to tune: its command, its planned run, tune's budget, the grid's levers."""

    command: list[str]
    run_steps: int
    budget_s: float
    loader: bool
    compile: bool
    busy: bool = False
    measure_steps: int | None = None
    """Measure the first this many steps of a slow script (``--steps N``), not its whole run."""


TARGETS = {
    "demo": Target(["python", "-m", "torchboost.workloads.vision", "--size", "tiny", "--steps", "400"], 400, 120.0,
                   loader=True, compile=False),
    "image": Target(["python", str(HERE / "scripts" / "image_loader.py"), "--epochs", "3"], 192, 300.0,
                    loader=True, compile=False),
    "gpt": Target(["python", str(HERE / "shapes" / "gpt_char_full.py"), "--steps", "2000"], 2000, 300.0,
                  loader=False, compile=True, measure_steps=30),
    "gpt-busy": Target(["python", str(HERE / "shapes" / "gpt_char_full.py"), "--steps", "2000"], 2000, 300.0,
                       loader=False, compile=False, busy=True, measure_steps=20),
}


def grid(target: Target, cores: int) -> list[dict[str, Any]]:
    """Every combination of the options tune's levers propose here (the baseline first)."""
    hosts: list[dict[str, Any]] = [{}] + [{"cpu.threads": t} for t in sorted({1, cores // 2}) if 0 < t < cores]
    if target.loader:
        for workers in range(1, min(4, cores) + 1):
            for threads in sorted({max(1, cores - workers), cores}):
                for sharing in ({}, {"loader.sharing_strategy": "file_system"}):
                    hosts.append({"loader.num_workers": workers, "loader.persistent_workers": True,
                                  "cpu.threads": threads, **sharing})
    options = [hosts, [{}, {"precision.mode": "bf16"}], [{}, {"fp32_math.mode": "bf16"}],
               [{}, {"optimizer.implementation": "fused"}, {"optimizer.implementation": "foreach"}]]
    if target.compile:
        options.append([{}, {"compile.mode": "default"}])
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*options)]


def _parity_ok(baseline: TrialResult, result: TrialResult, settings: dict[str, Any]) -> bool:
    kind = REDUCED if settings.get("precision.mode") == "bf16" or settings.get("fp32_math.mode") == "bf16" else EXACT
    if check_parity(baseline.losses, result.losses, kind=kind).ok:
        return True
    return kind == EXACT and check_parity(baseline.losses, result.losses, kind=STATISTICAL).ok


def _python(command: list[str]) -> list[str]:
    return [sys.executable, *command[1:]] if command[0] == "python" else list(command)


@contextmanager
def _beside(busy: bool) -> Iterator[None]:
    """A one-thread matmul loop in another process for the block's duration, when ``busy``."""
    loop = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    try:
        if loop is not None:
            time.sleep(2.0)
        yield
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()


def _tune(target: Target, work: Path) -> dict[str, Any]:
    out, config = work / "tune", work / "torchboost.toml"
    argv = [sys.executable, "-m", "torchboost.cli", "tune", "--budget", str(target.budget_s), "--out", str(out),
            "--config", str(config), "--", *target.command]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, NO_PROVEN_WIN, UNVERIFIED):  # no change proven faster, or unverified: results
        raise RuntimeError(f"tune failed: {done.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    outcome = json.loads((out / "outcome.json").read_text(encoding="utf-8"))
    return {"wall_s": wall, "settings": report["settings"], "claim": report["speedup"], "config": config,
            "status": report["status"], "steps_per_trial": outcome["steps_per_trial"], "verdict": report.get("verdict"),
            "decisions": [(d["change"], d["status"]) for d in report["decisions"]]}


def _grid_best(target: Target, steps: int, work: Path, journal_dir: Path, name: str,
               console: Console) -> dict[str, Any]:
    from torchboost.env import probe

    combos = grid(target, probe().cpu_cores)
    journal = Journal(journal_dir / f"{name}-{steps}steps.jsonl", resume=True)
    command = [sys.executable, *target.command[1:]]
    start, ranked, baseline = time.monotonic(), [], None
    for i, settings in enumerate(combos, 1):
        result = journal.lookup(settings, 0)
        if result is None:
            result = run_trial(TrialRequest(command=command, settings=settings, repeat=0, steps=steps, warmup=5,
                                            out_dir=work / "trial", timeout_s=900))
            journal.append(result)
        baseline = baseline or result
        ok = result.ok and _parity_ok(baseline, result, settings)
        planned_s = result.compile_s + target.run_steps * result.ms_per_step / 1e3
        if ok:
            ranked.append((planned_s, settings))
        console.print(f"  {name} grid {i}/{len(combos)}: {describe_settings(settings)}: "
                      f"{result.ms_per_step:.1f} ms/step{'' if ok else ' (not kept: failed or parity)'}",
                      highlight=False)
    ranked.sort(key=lambda item: item[0])
    return {"combinations": len(combos), "correct": len(ranked), "grid_s": time.monotonic() - start,
            "best": ranked[0][1], "best_planned_s": ranked[0][0], "top5": [s for _, s in ranked[:5]]}


def _timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: see benchmarks/claims.py
        done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {err.read()[-800:].decode()}")
    return seconds


def _measured(target: Target, configs: dict[str, Path | None], rounds: int, work: Path) -> dict[str, list[float]]:
    """Whole-process seconds of each configuration, ``rounds`` rounds, the order rotating."""
    command = list(target.command)
    if target.measure_steps is not None:
        command[command.index("--steps") + 1] = str(target.measure_steps)
    argv = {name: _python(command) if path is None else
            [sys.executable, "-m", "torchboost.cli", "run", "--config", str(path), "--", *command]
            for name, path in configs.items()}
    times: dict[str, list[float]] = {name: [] for name in argv}
    names = list(argv)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(_timed(argv[name], work))
    return times


def run_target(name: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    target = TARGETS[name]
    with tempfile.TemporaryDirectory(prefix=f"torchboost-delivered-{name}-") as tmp, _beside(target.busy):
        work = Path(tmp)
        console.print(f"[bold]{name}[/]: tune --budget {target.budget_s:.0f}", highlight=False)
        tuned = _tune(target, work)
        console.print(f"  tune: {tuned['wall_s']:.0f} s, kept {tuned['settings']}, claims {tuned['claim']:.2f}x",
                      highlight=False)
        best = _grid_best(target, int(tuned["steps_per_trial"]), work, Path(args.journal_dir), name, console)
        grid_config = work / "grid.toml"
        from torchboost.config import BoostConfig, Overlay

        Overlay(best["best"]).on(BoostConfig.off()).to_toml(grid_config)
        # Where tune kept nothing it tells the user to run the script as before: that is what they get.
        tune_config = tuned["config"] if tuned["settings"] else None
        times = _measured(target, {"plain": None, "tune": tune_config, "grid": grid_config}, args.rounds, work)
    plain, tune_t, grid_t = (statistics.median(times[k]) for k in ("plain", "tune", "grid"))
    return {"target": name, "busy": target.busy, "tune": {k: v for k, v in tuned.items() if k != "config"},
            "grid": best, "times": times, "tune_speedup": plain / tune_t, "grid_speedup": plain / grid_t,
            "delivered": grid_t / tune_t, "time_ratio": tuned["wall_s"] / best["grid_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="demo,image,gpt,gpt-busy")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of plain, tune's, grid's best")
    parser.add_argument("--journal-dir", default="delivered-journal", help="the grid's finished trials")
    parser.add_argument("--out", default="delivered.json")
    args = parser.parse_args(argv)
    # A SIGTERM ends the run through its finally blocks: the busy loop beside it is killed too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    console = Console()
    rows = []
    for name in args.targets.split(","):
        rows.append(run_target(name, args, console))
        Path(args.out).write_text(json.dumps(rows, indent=2, default=str), encoding="utf-8")
    table = Table(title="tune against a full grid of its levers (time = whole processes, median of rounds)")
    for col in ("target", "tune kept", "grid best", "tune x", "grid x", "delivered", "tune s", "grid s", "tune/grid time"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["target"], describe_settings(r["tune"]["settings"]), describe_settings(r["grid"]["best"]),
                      f"{r['tune_speedup']:.2f}", f"{r['grid_speedup']:.2f}", f"{r['delivered']:.1%}",
                      f"{r['tune']['wall_s']:.0f}", f"{r['grid']['grid_s']:.0f}", f"{r['time_ratio']:.1%}")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
