"""The doctor's GPU phases on a live run's trace, against HolisticTraceAnalysis on the same file.

    python benchmarks/gpu_vs_hta.py OUT [--trace FILE]

Reads the trace the doctor wrote in the full stage, tune's diagnosis of the GPT-2 script
(OUT/tune/doctor/trace.pt.trace.json unless ``--trace``), prints one table (idle, compute and non-compute shares of the GPU's time,
torchboost's and HTA 0.5.0's ``get_temporal_breakdown``, and their difference), and writes
it to OUT/gpu_vs_hta.md and OUT/hta.json. Exit status 0 when every share is within
:data:`AGREE_POINTS` of HTA's, 1 when one is not or HTA could not read the trace, 2 when
there is no trace or it holds no GPU events.

HTA reads a rank from each trace file's ``distributedInfo`` and warns without one; a
single-process trace from the doctor has none, so HTA is handed a copy, in a folder of its
own (it reads every trace in the folder it is given), with ``"distributedInfo": {"rank": 0}``
added.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from torchboost.diagnose.trace_file import facts_from_trace, load_traces

SHARES = ("idle", "compute", "non_compute")
"""The temporal breakdown's three shares, as torchboost's ``gpu`` facts name them (``*_pct``)."""

AGREE_POINTS = 2.0
"""The most a share may differ from HTA's, percentage points (tests/diagnose/test_gpu_trace.py's bound)."""


def hta_shares(data: dict) -> dict[str, float]:
    """HTA's idle, compute and non-compute percentages of the trace ``data`` (parsed), from a
    copy that names its rank. Raises ImportError without HTA (or plotly, which it imports)."""
    from hta.trace_analysis import TraceAnalysis

    named = {**data, "distributedInfo": data.get("distributedInfo") or {"rank": 0}}
    with tempfile.TemporaryDirectory(prefix="gpu-vs-hta-") as folder:
        # json's default separators: HTA finds the rank with a regex that wants a space after the colon
        (Path(folder) / "trace.json").write_text(json.dumps(named), encoding="utf-8")
        row = TraceAnalysis(trace_dir=folder).get_temporal_breakdown(visualize=False).iloc[0]
    return {name: float(row[f"{name}_time_pctg"]) for name in SHARES}


def compare(trace: Path) -> dict:
    """torchboost's shares, HTA's (or its error), and whether they agree within :data:`AGREE_POINTS`."""
    file, data = load_traces(trace)[0]
    gpu = facts_from_trace(file, data, 0).gpu
    if gpu is None:
        return {"trace": str(trace), "error": "no GPU events in the trace"}
    ours = {name: float(gpu[f"{name}_pct"]) for name in SHARES}
    try:
        theirs = hta_shares(data)
    except Exception as exc:  # noqa: BLE001 - ours are still worth printing
        return {"trace": str(trace), "torchboost": ours, "hta": None,
                "hta_error": f"{type(exc).__name__}: {exc}".splitlines()[0], "agree": False}
    worst = max(abs(ours[name] - theirs[name]) for name in SHARES)
    return {"trace": str(trace), "torchboost": ours, "hta": theirs, "most_apart_points": worst,
            "agree": worst <= AGREE_POINTS}


def table(result: dict) -> str:
    """The comparison as a Markdown table, with a line saying whether they agree."""
    ours, theirs = result["torchboost"], result.get("hta")
    lines = ["| share of GPU time | torchboost | HTA 0.5.0 | apart (points) |", "|---|---:|---:|---:|"]
    for name in SHARES:
        hta = f"{theirs[name]:.2f}%" if theirs else "-"
        apart = f"{abs(ours[name] - theirs[name]):.2f}" if theirs else "-"
        lines.append(f"| {name.replace('_', '-')} | {ours[name]:.2f}% | {hta} | {apart} |")
    if theirs is None:
        lines.append(f"\nHTA could not analyse the trace: {result['hta_error']}")
    else:
        lines.append(f"\n{'Within' if result['agree'] else 'NOT within'} {AGREE_POINTS:g} points of HTA "
                     f"(at most {result['most_apart_points']:.2f} apart).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit status (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the full stage's folder")
    parser.add_argument("--trace", type=Path, default=None, help="default OUT/tune/doctor/trace.pt.trace.json")
    args = parser.parse_args(argv)
    trace = args.trace or args.out / "tune" / "doctor" / "trace.pt.trace.json"
    if not trace.is_file():
        print(f"gpu_vs_hta: no trace at {trace}: tune's diagnosis wrote none (see tune.log)")
        return 2
    result = compare(trace)
    (args.out / "hta.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    if "torchboost" not in result:
        print(f"gpu_vs_hta: {trace}: {result['error']}")
        return 2
    text = table(result)
    (args.out / "gpu_vs_hta.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if result["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
