"""The GPU run's results, gathered into three files that fit what comes back from the machine.

    python benchmarks/gpu_results.py WORK OUT     # benchmarks/gpu.sh runs it after each part and stage

Reads gpu.sh's working folder WORK (plan.tsv: each stage's time limit; stages.tsv: how each
stage ended; smoke/: the smoke stage's smoke.json and logs; full/: parts.tsv and each part's
output, gemm.json, gpt.json, tune/report.json, hta.json) and writes, each replaced whole:

- OUT/results.md: the stages, the GEMM ceilings beside the datasheet peaks, the GPT-2 table,
  tune's pick and the doctor's findings on the GPT-2 script, the GPU shares against HTA;
- OUT/results.json: the same figures as data (:func:`results`);
- OUT/logs.tar.gz: everything under WORK (every log, report and trace), but for files over
  :data:`LARGEST_BYTES`, named in results.json's ``left_out``, so the tarball stays under
  what one file back from the machine may be.

Needs neither torch nor torchboost: it runs in a second, even where the stages failed.
Exit status 0 (1 when WORK is not a folder).
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path

DATASHEET_TFLOPS = {
    "H100 SXM": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H100 PCIe": {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2},
    "H100 NVL": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "H200 SXM": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H200 NVL": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
}
"""NVIDIA's datasheet peaks, dense (the datasheets' tensor-core figures are with 2:4
sparsity: these are half of them), TFLOP/s; fp32 is the CUDA cores' (no tensor cores)."""

LARGEST_BYTES = 24 * 2**20
"""A file over this is left out of the tarball (a long run's trace); its name is kept."""

MATHS = ("bf16", "fp16", "tf32", "fp32")


def variant(device: str) -> str | None:
    """The key of :data:`DATASHEET_TFLOPS` a CUDA device name stands for, or None."""
    for chip in ("H100", "H200"):
        if chip in device:
            form = next((f for f in ("PCIe", "NVL") if f.lower() in device.lower()), "SXM")
            return f"{chip} {form}"
    return None


def _read(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _tsv(path: Path) -> list[list[str]]:
    try:
        return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return []


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _ended(rows: list[list[str]]) -> list[dict]:
    """stages.tsv's or parts.tsv's rows: name, status, exit code, seconds, time limit."""
    ended = []
    for row in rows:
        name, status, code, seconds, limit = (row + [""] * 5)[:5]
        ended.append({"name": name, "status": status, "exit_code": None if _number(code) is None else int(float(code)),
                      "seconds": _number(seconds), "limit_s": _number(limit)})
    return ended


def _smoke(work: Path) -> dict | None:
    checks = _read(work / "smoke" / "smoke.json")
    if not isinstance(checks, list):
        return None
    count = {status: sum(c.get("status") == status for c in checks) for status in ("pass", "fail", "skip", "warn")}
    return {**count, "failed": [c for c in checks if c.get("status") == "fail"]}


def _peaks(gemm: dict | None, device: str) -> dict:
    """The datasheet's H100 and H200 rows (and the machine's own form), and the GEMM measured."""
    own = variant(device)
    shown = sorted({"H100 SXM", "H200 SXM", *([own] if own else [])})
    return {"machine": own, "datasheet_tflops": {name: DATASHEET_TFLOPS[name] for name in shown},
            "measured_tflops": (gemm or {}).get("tflops"), "gemm_n": (gemm or {}).get("n")}


def _gpt(gpt: dict | None, peaks: dict) -> dict:
    """gpt.json's runs, each with its MFU against the bf16 datasheet peak and the measured bf16
    GEMM (the usual yardstick), and against its own math's ceiling, measured and datasheet."""
    runs = {how: dict(row) for how, row in (gpt or {}).get("runs", {}).items()}
    measured = peaks["measured_tflops"] or {}
    sheet = DATASHEET_TFLOPS.get(peaks["machine"] or "", {})
    naive = runs.get("naive", {}).get("tokens_per_s")
    for row in runs.values():
        if "tokens_per_s" not in row:
            continue
        done, math = row["achieved_tflops"], row.get("math", "fp32")
        row["mfu"] = {"datasheet_bf16": _share(done, sheet.get("bf16")), "measured_bf16": _share(done, measured.get("bf16")),
                      "datasheet_own_math": _share(done, sheet.get(math)),
                      "measured_own_math": _share(done, measured.get(math))}
        row["speedup_vs_naive"] = row["tokens_per_s"] / naive if naive else None
    return runs


def _share(done: float, peak: float | None) -> float | None:
    return done / peak if peak else None


def _tune(report: dict | None, part: dict | None) -> dict | None:
    """tune's report: what it kept, how it verified it, each decision, the doctor's findings."""
    if report is None:
        return None if part is None else {"exit_code": part["exit_code"], "status": part["status"]}
    keys = ("status", "error", "settings", "speedup", "search_speedup", "verdict", "elapsed_s", "stopped_by_budget",
            "memory", "mfu", "unverified")
    return {**{key: report.get(key) for key in keys}, "exit_code": None if part is None else part["exit_code"],
            "decisions": [{k: d.get(k) for k in ("change", "status", "ratio", "compile_cold_s", "verdict")}
                          for d in report.get("decisions", [])],
            "findings": [{k: f.get(k) for k in ("id", "title", "expected_speedup")} for f in report.get("findings", [])[:5]]}


def results(work: Path) -> dict:
    """Every figure of the run in ``work``, as plain data (results.json)."""
    full = work / "full"
    gemm, gpt = _read(full / "gemm.json"), _read(full / "gpt.json")
    machine = {row[0]: row[1] for row in _tsv(work / "machine.tsv") if len(row) > 1}  # gpu.sh's words
    machine.update({k: v for k, v in (gemm or gpt or {}).items() if k not in ("n", "tflops", "runs", "batch",
                                                                          "tuned_config")})
    peaks = _peaks(gemm, str(machine.get("device", "")))
    parts = _ended(_tsv(full / "parts.tsv"))
    tune_part = next((p for p in parts if p["name"] == "tune"), None)
    return {
        "limits_s": {row[0]: _number(row[1]) for row in _tsv(work / "plan.tsv") if len(row) > 1},
        "stages": _ended(_tsv(work / "stages.tsv")), "smoke": _smoke(work), "machine": machine, "parts": parts,
        "peaks": peaks, "gpt_batch": (gpt or {}).get("batch"), "gpt_tuned_config": (gpt or {}).get("tuned_config"),
        "gpt": _gpt(gpt, peaks), "tune": _tune(_read(full / "tune" / "report.json"), tune_part),
        "hta": _read(full / "hta.json"), "left_out": [],
    }


def pack(work: Path, tarball: Path) -> list[str]:
    """Every file under ``work`` into ``tarball`` (gzip), but those over :data:`LARGEST_BYTES`;
    returns the names of those left out."""
    left_out = []
    partial = tarball.with_name(tarball.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for folder, dirs, files in os.walk(work):
            dirs.sort()
            for name in sorted(files):
                path = Path(folder, name)
                rel = path.relative_to(work).as_posix()
                if path.is_symlink() or not path.is_file():
                    continue
                if path.stat().st_size > LARGEST_BYTES:
                    left_out.append(f"{rel} ({path.stat().st_size / 2**20:.0f} MiB)")
                    continue
                tar.add(path, arcname=rel)
    partial.replace(tarball)  # whole or not at all: the machine may be taken back mid-write
    return left_out


def _write(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, form: str = ".0f") -> str:
    return "-" if value is None else format(value, form)


def markdown(r: dict, hta_table: Path) -> list[str]:
    """results.md: the stages, then one section per part that measured."""
    machine = r["machine"]
    torch_words = machine.get("torch", "?")
    if "cuda" in machine:
        torch_words = f"torch {torch_words}, CUDA {machine['cuda']}"
    lines = [f"# GPU run: {machine.get('device', '?')}, {torch_words}", "", "| stage or part | status | exit | seconds (limit) |",
             "|---|---|---:|---:|"]
    for row in r["stages"] + [{**p, "name": f"full: {p['name']}"} for p in r["parts"]]:
        lines.append(f"| {row['name']} | {row['status']} | {_num(row['exit_code'])} | {_num(row['seconds'])} "
                     f"({_num(row['limit_s'])}) |")
    limits = r["limits_s"]
    if limits:
        lines += ["", "Limits, seconds: " + ", ".join(f"{k} {_num(v)}" for k, v in limits.items()) + "."]
    return lines + _smoke_lines(r["smoke"]) + _peak_lines(r["peaks"]) + _gpt_lines(r) + _tune_lines(r["tune"]) \
        + _hta_lines(hta_table) + ([""] + [f"Left out of logs.tar.gz (too large): {', '.join(r['left_out'])}."]
                                   if r["left_out"] else [])


def _smoke_lines(smoke: dict | None) -> list[str]:
    if smoke is None:
        return []
    lines = ["", f"## Smoke: {smoke['pass']} passed, {smoke['fail']} failed, {smoke['skip']} skipped, "
                 f"{smoke['warn']} warned"]
    return lines + ([""] if smoke["failed"] else []) + [f"- FAIL {c['name']}: {c.get('detail', '')}"
                                                        for c in smoke["failed"]]


def _peak_lines(peaks: dict) -> list[str]:
    measured = peaks["measured_tflops"]
    if not measured:
        return []
    lines = ["", f"## Matmul ceilings, TFLOP/s ({peaks['gemm_n']}^3 measured here; datasheet dense peaks)", "",
             "| | " + " | ".join(MATHS) + " |", "|---|" + "---:|" * len(MATHS),
             "| measured here | " + " | ".join(_num(measured.get(m), ".1f") for m in MATHS) + " |"]
    for name, sheet in peaks["datasheet_tflops"].items():
        mark = " (this machine)" if name == peaks["machine"] else ""
        lines.append(f"| {name} datasheet{mark} | " + " | ".join(_num(sheet[m], ".1f") for m in MATHS) + " |")
    if peaks["machine"]:
        sheet = DATASHEET_TFLOPS[peaks["machine"]]
        lines.append(f"| measured / datasheet | " + " | ".join(_pct(_share(measured[m], sheet[m])) if m in measured
                                                                  else "-" for m in MATHS) + " |")
    return lines


def _compile_words(row: dict) -> str:
    stats = row.get("compile")
    if not stats or stats["mode"] == "off":
        return "off"
    if stats["fell_back"]:
        return f"fell back to eager: {stats['error']}"
    return f"{stats['mode']}, first call {_num(stats['first_call_s'])} s"


def _gpt_lines(r: dict) -> list[str]:
    if not r["gpt"]:
        return []
    lines = ["", f"## GPT-2 124M, context 1024, batch {r['gpt_batch']}: naive, then tune's pick "
                 f"({r['gpt_tuned_config']})", "",
             "Median step after warm-up, the loader's next() inside the timed step. MFU: model FLOPs against "
             "the bf16 datasheet peak and the measured bf16 GEMM; then against the ceiling of the math the run "
             "computes in.", "",
             "| way | tokens/s | x naive | TFLOP/s | math | MFU bf16 datasheet | MFU bf16 measured "
             "| own math datasheet | own math measured | ms/step | peak GiB | compile |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for how, row in r["gpt"].items():
        if "tokens_per_s" not in row:
            lines.append(f"| {how} | {'failed: ' + row['error'] if 'error' in row else 'not measured: ' + row.get('skipped', '')}"
                         " | | | | | | | | | | |")
            continue
        mfu, peak = row["mfu"], row.get("peak_bytes")
        lines.append(f"| {how} | {row['tokens_per_s']:,.0f} | {_num(row['speedup_vs_naive'], '.2f')} | "
                     f"{row['achieved_tflops']:.1f} | {row['math']} | {_pct(mfu['datasheet_bf16'])} | "
                     f"{_pct(mfu['measured_bf16'])} | {_pct(mfu['datasheet_own_math'])} | "
                     f"{_pct(mfu['measured_own_math'])} | {row['median_step_ms']:.1f} | "
                     f"{'-' if peak is None else f'{peak / 2**30:.1f}'} | {_compile_words(row)} |")
    return lines


def _tune_lines(tune: dict | None) -> list[str]:
    if not tune:
        return []
    if "decisions" not in tune:
        return ["", f"## tune: no report ({tune['status']}, exit status {_num(tune['exit_code'])}; see tune.log)"]
    kept = ", ".join(f"{k}={v}" for k, v in (tune["settings"] or {}).items()) or "nothing"
    lines = ["", f"## tune on the GPT-2 script: {tune['status']} (exit status {_num(tune['exit_code'])}, "
                 f"{_num(tune['elapsed_s'])} s)", "",
             f"Kept {kept}; search x{_num(tune['search_speedup'], '.2f')}, end to end x{_num(tune['speedup'], '.2f')}"
             f"{'; ' + tune['verdict'] if tune['verdict'] else ''}{'; ' + tune['error'] if tune['error'] else ''}.", ""]
    lines += [f"- {d['change']}: {d['status']}" + (f" ({d['verdict']})" if d["verdict"] else "") for d in tune["decisions"]]
    if tune["findings"]:
        lines += ["", "The doctor's findings on the script (tune's diagnosis):", ""]
        lines += [f"- `{f['id']}` x{_num(f['expected_speedup'], '.2f')}: {f['title']}" for f in tune["findings"]]
    return lines


def _hta_lines(table: Path) -> list[str]:
    try:
        text = table.read_text(encoding="utf-8").strip()
    except OSError:
        return []
    return ["", "## The doctor's GPU shares against HTA's, same trace", "", text]


def main(argv: list[str] | None = None) -> int:
    """Command line: gather WORK into OUT; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python benchmarks/gpu_results.py WORK OUT", file=sys.stderr)
        return 2
    work, out = Path(args[0]), Path(args[1])
    if not work.is_dir():
        print(f"gpu_results: {work}: not a folder", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    data = results(work)
    data["left_out"] = pack(work, out / "logs.tar.gz")
    _write(out / "results.json", json.dumps(data, indent=2) + "\n")
    _write(out / "results.md", "\n".join(markdown(data, (work / "full" / "gpu_vs_hta.md"))) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
