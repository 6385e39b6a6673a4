"""Side-by-side benchmark of the built-in workloads: naive, hand-tuned, peers, torchboost.

    python benchmarks/bench.py --workloads vision,mlp,data,gpt --quick --out bench.json

For each workload the rows run interleaved (naive hand lightning accelerate torchboost,
then again, ``--repeats`` times), each run in its own child process (``_loops.py``):
thread counts, loader workers and compiled code are process-wide, so a row run in
the parent would inherit the previous row's. Warm-up steps are excluded from the
throughput; the table shows medians over repeats, ratios to the naive and hand rows,
peak memory and the loss after the run's steps. Lightning and Accelerate are optional
(``pip install -e '.[bench]'``); a missing one is a skipped row with the reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _mfu import flops_per_sample, mfu_pct, peak_flops_per_s
from torchboost._io import atomic_write_bytes

__all__ = ["MODES", "Mode", "RowSummary", "plan_modes", "summarise", "main"]

_HERE = Path(__file__).resolve().parent
ROWS = ("naive", "hand", "lightning", "accelerate", "torchboost")
WORKLOADS = ("vision", "mlp", "data", "gpt")
_PEERS = {"lightning": "lightning", "accelerate": "accelerate"}


@dataclass(frozen=True)
class Mode:
    """Steps (warm-up included) and warm-up steps per workload, and repeats per row."""

    steps: dict[str, int]
    warmup: dict[str, int]
    repeats: int


MODES = {
    "full": Mode(
        steps={"gpt": 300, "vision": 300, "mlp": 2000, "data": 300},
        warmup={"gpt": 30, "vision": 30, "mlp": 200, "data": 30},
        repeats=5,
    ),
    # About 2 s of timed steps per run on a 2-core CPU; the whole run under 10 minutes.
    "quick": Mode(
        steps={"gpt": 60, "vision": 80, "mlp": 300, "data": 80},
        warmup={"gpt": 10, "vision": 10, "mlp": 50, "data": 10},
        repeats=3,
    ),
    "smoke": Mode(
        steps={"gpt": 4, "vision": 4, "mlp": 4, "data": 4},
        warmup={"gpt": 1, "vision": 1, "mlp": 1, "data": 1},
        repeats=1,
    ),
}
"""Named run lengths: full (for RESULTS.md), quick (minutes), smoke (a test)."""


@dataclass
class RowSummary:
    """One (workload, row) cell of the table: medians over the repeats that ran."""

    workload: str
    row: str
    status: str
    """"ok", "skipped" (reason says why) or "failed" (reason has the error's tail)."""
    reason: str = ""
    samples_per_s: float | None = None
    """Median samples per second over repeats, warm-up excluded."""
    runs_samples_per_s: list[float] = field(default_factory=list)
    ratio_to_naive: float | None = None
    ratio_to_hand: float | None = None
    peak_memory_bytes: int | None = None
    """Median peak: CUDA max allocated, or the main process's peak RSS on CPU."""
    final_loss: float | None = None
    """Median over repeats of the mean loss of the last steps."""
    first_loss: float | None = None
    steps: int = 0
    warmup_steps: int = 0
    total_s: float | None = None
    """Median wall seconds of a run's steps, warm-up and compile included."""
    mfu_pct: float | None = None
    """samples/s x the model's FLOPs per sample over the probe's fp32 matmul peak (``_mfu.py``)."""
    choices: dict[str, Any] = field(default_factory=dict)


def plan_modes(args: argparse.Namespace) -> Mode:
    """The run lengths from --quick/--smoke and any --steps/--warmup/--repeats override."""
    mode = MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    steps = {w: args.steps or n for w, n in mode.steps.items()}
    warmup = {w: args.warmup if args.warmup is not None else n for w, n in mode.warmup.items()}
    for w in steps:
        if not 0 <= warmup[w] < steps[w]:
            raise ValueError(f"--warmup {warmup[w]} must be below --steps {steps[w]} ({w})")
    return Mode(steps=steps, warmup=warmup, repeats=args.repeats or mode.repeats)


def _skip_reason(row: str) -> str:
    if row in _PEERS and importlib.util.find_spec(_PEERS[row]) is None:
        return f"{_PEERS[row]} is not installed (pip install -e '.[bench]')"
    if row == "torchboost" and importlib.util.find_spec("torchboost.booster") is None:
        return "torchboost.Booster is not in this installation"
    return ""


def _config_for(workload: str, args: argparse.Namespace) -> Path | None:
    """The torchboost row's config: DIR/<workload>.toml from --config-dir, else --config."""
    if args.config_dir:
        tuned = Path(args.config_dir) / f"{workload}.toml"
        if tuned.is_file():
            return tuned
    return Path(args.config) if args.config else None


def _run_child(row: str, workload: str, args: argparse.Namespace, mode: Mode) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [
            sys.executable, str(_HERE / "_loops.py"), "--row", row, "--workload", workload,
            "--size", args.size, "--steps", str(mode.steps[workload]),
            "--warmup", str(mode.warmup[workload]), "--seed", str(args.seed), "--result", str(result),
        ]  # fmt: skip
        config = _config_for(workload, args)
        if config is not None and row == "torchboost":
            cmd += ["--config", str(config.resolve())]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {args.child_timeout} s"}
        if proc.returncode != 0 or not result.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
        return json.loads(result.read_text(encoding="utf-8"))


def summarise(workload: str, row: str, runs: list[dict[str, Any]]) -> RowSummary:
    """Medians of one row's successful runs; "failed" with the first error when none succeeded."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return RowSummary(workload, row, "failed", reason=runs[0]["error"] if runs else "no runs")
    return RowSummary(
        workload, row, "ok",
        samples_per_s=statistics.median(r["samples_per_s"] for r in ok),
        runs_samples_per_s=[r["samples_per_s"] for r in ok],
        peak_memory_bytes=int(statistics.median(r["peak_memory_bytes"] for r in ok)),
        final_loss=statistics.median(r["final_loss"] for r in ok),
        first_loss=statistics.median(r["first_loss"] for r in ok),
        steps=ok[0]["steps"], warmup_steps=ok[0]["warmup_steps"],
        total_s=statistics.median(r["total_s"] for r in ok), choices=ok[0].get("choices", {}),
        reason="" if len(ok) == len(runs) else f"{len(runs) - len(ok)} of {len(runs)} runs failed",
    )  # fmt: skip


def _add_ratios(rows: list[RowSummary]) -> None:
    base = {r.row: r.samples_per_s for r in rows if r.status == "ok"}
    for r in rows:
        if r.samples_per_s is None:
            continue
        if base.get("naive"):
            r.ratio_to_naive = r.samples_per_s / base["naive"]
        if base.get("hand"):
            r.ratio_to_hand = r.samples_per_s / base["hand"]


def _add_mfu(rows: list[RowSummary], workload: str, size: str, peak: float | None) -> None:
    """Each ok row's MFU: its samples/s at the workload's FLOPs per sample, over ``peak``."""
    per_sample = flops_per_sample(workload, size)
    for r in rows:
        r.mfu_pct = mfu_pct(r.samples_per_s, per_sample, peak)


def _table(summaries: list[RowSummary], title: str) -> Table:
    table = Table(title=title)
    for name, justify in [("workload", "left"), ("row", "left"), ("samples/s", "right"), ("MFU", "right"), ("x naive", "right"),
                          ("x hand", "right"), ("peak MiB", "right"), ("loss@steps", "right"), ("run s", "right"),
                          ("note", "left")]:  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    for s in summaries:
        loss = "-" if s.final_loss is None else f"{s.final_loss:.3f}@{s.steps}"
        memory = None if s.peak_memory_bytes is None else s.peak_memory_bytes / 2**20
        note = s.reason if s.status != "ok" or s.reason else ""
        table.add_row(
            s.workload, s.row if s.status == "ok" else f"{s.row} ({s.status})", num(s.samples_per_s, ",.0f"),
            "-" if s.mfu_pct is None else f"{s.mfu_pct:.1f}%", num(s.ratio_to_naive, ".2f"), num(s.ratio_to_hand, ".2f"), num(memory, ",.0f"), loss,
            num(s.total_s, ".1f"), note,
        )  # fmt: skip
    return table


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list (default: all four)")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma list (default: all five)")
    parser.add_argument("--size", default="tiny", help="workload size: tiny | small | gpt2 (default tiny)")
    parser.add_argument("--quick", action="store_true", help="short runs, 3 repeats: minutes on a 2-core CPU")
    parser.add_argument("--smoke", action="store_true", help="a few steps, 1 repeat: checks that every row runs")
    parser.add_argument("--steps", type=int, default=None, help="steps per run, warm-up included (all workloads)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps left out of throughput")
    parser.add_argument("--repeats", type=int, default=None, help="runs per row; the table shows medians")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default=None, help="torchboost.toml for the torchboost row (default: auto)")
    parser.add_argument("--config-dir", default=None,
                        help="folder of per-workload configs (WORKLOAD.toml, e.g. from torchboost tune); "
                             "overrides --config where present")
    parser.add_argument("--child-timeout", type=float, default=600.0, help="seconds per run before it fails")
    parser.add_argument("--out", default="bench.json", help="JSON results file (default bench.json)")
    args = parser.parse_args(argv)
    for kind, given, valid in (("workload", args.workloads, WORKLOADS), ("row", args.rows, ROWS)):
        unknown = [x for x in given.split(",") if x not in valid]
        if unknown:
            parser.error(f"unknown {kind} {', '.join(unknown)}; choose from {', '.join(valid)}")
    if args.config and not Path(args.config).is_file():
        parser.error(f"--config {args.config}: no such file")
    if args.config_dir and not Path(args.config_dir).is_dir():
        parser.error(f"--config-dir {args.config_dir}: no such folder")
    try:
        args.mode = plan_modes(args)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def _machine() -> dict[str, Any]:
    from torchboost.env import probe

    env = probe()
    keys = ("device", "torch_version", "cpu_cores", "ram_bytes", "cpu_flags", "cpu_capability", "gpu_name")
    return {k: env.to_dict()[k] for k in keys}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write ``--out``. Returns the exit code."""
    args = _parse(argv)
    mode: Mode = args.mode
    workloads, rows = args.workloads.split(","), args.rows.split(",")
    console = Console(width=None if sys.stdout.isatty() else 150)  # a log file gets the whole table
    peak, peak_words = peak_flops_per_s()  # before the rows: the probe runs alone
    started = time.perf_counter()
    summaries: list[RowSummary] = []
    for workload in workloads:
        runs: dict[str, list[dict[str, Any]]] = {row: [] for row in rows}
        skipped = {row: _skip_reason(row) for row in rows}
        for repeat in range(mode.repeats):
            for row in rows:  # interleaved: A B C ... A B C, so drift hits every row alike
                if skipped[row]:
                    continue
                console.print(f"[dim]{workload} {row} run {repeat + 1}/{mode.repeats}[/dim]")
                runs[row].append(_run_child(row, workload, args, mode))
        cells = [
            RowSummary(workload, row, "skipped", reason=skipped[row]) if skipped[row] else summarise(workload, row, runs[row])
            for row in rows
        ]  # fmt: skip
        _add_ratios(cells)
        _add_mfu(cells, workload, args.size, peak)
        summaries += cells
    elapsed = time.perf_counter() - started
    machine = _machine()
    title = (
        f"{args.size} workloads, {mode.repeats} repeats, medians; {machine['device']}, "
        f"{machine['cpu_cores']} cores, torch {machine['torch_version']}; {elapsed:.0f} s; MFU against the {peak_words}"
    )
    console.print(_table(summaries, title))
    report = {
        "command": ["python", "benchmarks/bench.py", *(sys.argv[1:] if argv is None else argv)],
        "machine": {**machine, "peak_flops_per_s": peak},
        "size": args.size,
        "mode": asdict(mode),
        "elapsed_s": elapsed,
        "results": [asdict(s) for s in summaries],
    }
    atomic_write_bytes(Path(args.out), (json.dumps(report, indent=2) + "\n").encode("utf-8"))
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
