"""The doctor's GPU facts on a live run's trace, against HolisticTraceAnalysis on the same file.

    python benchmarks/gpu_vs_hta.py RESULTS_DIR

Reads RESULTS_DIR/vision-before/trace.pt.trace.json (written by gpu_bench.py on a CUDA
machine) and prints one table: idle, compute and non-compute shares, ours and HTA's
(HTA's column says "not installed" when ``hta`` cannot be imported).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from torchboost.diagnose.trace_file import facts_from_trace, load_traces


def hta_shares(trace: Path) -> tuple[float, float, float] | None:
    """HTA's (idle, compute, non-compute) percentages for ``trace``; None without HTA."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(trace, Path(folder) / trace.name)
        row = TraceAnalysis(trace_dir=folder).get_temporal_breakdown(visualize=False).iloc[0]
    return float(row["idle_time_pctg"]), float(row["compute_time_pctg"]), float(row["non_compute_time_pctg"])


def main(argv: list[str]) -> int:
    trace = Path(argv[0] if argv else "gpu-results") / "vision-before" / "trace.pt.trace.json"
    file, data = load_traces(trace)[0]
    gpu = facts_from_trace(file, data, 0).gpu
    if gpu is None:
        print(f"{trace}: no GPU events in the trace")
        return 1
    ours = (gpu["idle_pct"], gpu["compute_pct"], gpu["non_compute_pct"])
    theirs = hta_shares(trace)
    print("| share | torchboost | HTA |\n|---|---:|---:|")
    for i, name in enumerate(("idle", "compute", "non-compute")):
        print(f"| {name} | {ours[i]:.2f}% | {'not installed' if theirs is None else f'{theirs[i]:.2f}%'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
