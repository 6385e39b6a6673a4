"""The GPU machine's smoke stage: each CUDA path on a tiny model, one pass/fail line each.

    python benchmarks/gpu_smoke.py [--limit SECONDS] OUT   # benchmarks/gpu.sh runs it after its install

1. Imports: every module torchboost and the two stages need, a line each with its version or
   its error. The full stage's HTA check alone needs pandas, plotly and hta: where there is no
   GPU (the full stage then measures nothing) a failure of theirs is a ``warn`` line, not a
   failed check.
2. The tests marked ``gpu`` (``python -m pytest -m gpu`` over the test files that mark one,
   so that collection does not import the whole suite; on a GPU in 4 processes where
   pytest-xdist is there; tests/conftest.py skips them where torch sees no CUDA GPU): a line
   each, read from OUT/gpu-tests.xml, a failure's with the first line of its error;
   pytest's own output is in OUT/gpu-tests.log.
3. ``python -m torchboost doctor`` end to end on benchmarks/scripts/char_gpt.py shrunk to a
   tiny model, on CUDA: its report in OUT/doctor-tiny; it passes when the doctor exits 0
   having measured steps of a model on CUDA and found GPU kernels in its trace.

2 and 3 run at the same time, each until what is left of ``--limit`` (default
:data:`LIMIT_S`), its whole process group ended past it. Every check is in OUT/smoke.json,
written after the imports and again at the end. The last line, with a GPU: ``smoke: P
passed, F failed`` (exit status 1 when F > 0). Without one: ``no CUDA GPU: N checks
skipped`` (N: the gpu tests collected and the doctor check), exit status 0, unless an
import failed.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "scripts" / "char_gpt.py"
TINY = ["--n_layer", "2", "--n_head", "2", "--n_embd", "64", "--block_size", "64", "--batch_size", "8",
        "--max_iters", "500", "--eval_interval", "0", "--chars", "100000"]
"""char_gpt.py shrunk so that the doctor's run takes seconds (about 0.1M parameters)."""

LIMIT_S = 85
"""The whole smoke's time, seconds (gpu.sh gives it its stage's limit less a margin)."""
WRITE_S = 3
"""Kept of the limit for the summary and smoke.json, seconds."""
GPU_WORKERS = 4
"""pytest-xdist processes for the gpu tests on a GPU (one process where xdist is absent)."""

REQUIRED = ("torch", "numpy", "rich", "psutil", "tomli_w", "jinja2", "matplotlib", "pytest", "torchboost",
            "torchboost.cli")
"""What torchboost, its tests and both stages import."""
FULL_STAGE_ONLY = ("pandas", "narwhals", "networkx", "plotly", "hta.trace_analysis")
"""What only the full stage's HTA check imports (HTA and plotly come from benchmarks/wheels)."""
_DISTRIBUTIONS = {"hta.trace_analysis": "HolisticTraceAnalysis", "tomli_w": "tomli-w"}


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the smoke stage."""

    name: str
    status: str
    """``pass``, ``fail``, ``skip`` or ``warn`` (a failure that does not count, said why)."""
    detail: str = ""

    def line(self) -> str:
        """``PASS  name: detail``."""
        return f"{self.status.upper():<4}  {self.name}" + (f": {self.detail}" if self.detail else "")


def import_checks(cuda: bool) -> list[Check]:
    """One check per module of :data:`REQUIRED` and :data:`FULL_STAGE_ONLY`."""
    checks = []
    for name in REQUIRED + FULL_STAGE_ONLY:
        try:
            module = importlib.import_module(name)
            checks.append(Check(f"import {name}", "pass", _version(name, module)))
        except Exception as exc:  # noqa: BLE001 - an import can fail in many ways; each is a line
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            if name in FULL_STAGE_ONLY and not cuda:
                error += " (the full stage's HTA check needs it; without a GPU that stage measures nothing)"
                checks.append(Check(f"import {name}", "warn", error))
            else:
                checks.append(Check(f"import {name}", "fail", error))
    return checks


def _version(name: str, module: object) -> str:
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(_DISTRIBUTIONS.get(name, name.split(".")[0]))
        except importlib.metadata.PackageNotFoundError:
            return ""
    return str(version)


def run_limited(argv: list[str], limit_s: float, log: Path, cwd: Path) -> int:
    """Run ``argv`` in ``cwd``, its output into ``log``; its exit status, or 124 when it ran
    past ``limit_s`` (its process group is then sent SIGTERM, and SIGKILL 5 s later)."""
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            for sig, grace_s in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=grace_s)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
            out.write(f"\n[gpu_smoke: ended after its {limit_s:.0f} s limit]\n")
            return 124


def gpu_test_files() -> list[str]:
    """The test files that mark a test ``gpu``, relative to the checkout, sorted."""
    return sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                  if "mark.gpu" in path.read_text(encoding="utf-8", errors="replace"))


def gpu_test_checks(out: Path, limit_s: float, cuda: bool) -> list[Check]:
    """The tests marked gpu, a check each (from the JUnit XML); one failed check when pytest
    itself failed (ran past ``limit_s``, crashed, wrote no XML)."""
    xml, log = out / "gpu-tests.xml", out / "gpu-tests.log"
    # no cache and no pytest-benchmark (where installed it makes .benchmarks/): nothing into the tree
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-p", "no:benchmark", "-q", "-rA",
            "--continue-on-collection-errors", "--junitxml", str(xml)]
    if cuda and importlib.util.find_spec("xdist") is not None:
        argv += ["-n", str(GPU_WORKERS)]
    code = run_limited(argv + (gpu_test_files() or ["tests"]), limit_s, log, cwd=REPO)
    checks = junit_checks(xml) if code != 124 and xml.is_file() else []
    if code == 124:
        checks.append(Check("pytest -m gpu", "fail", f"ran past its {limit_s:.0f} s limit (see gpu-tests.log)"))
    elif code not in (0, 1, 5) or (code == 1 and not any(c.status == "fail" for c in checks)):
        checks.append(Check("pytest -m gpu", "fail", f"exit status {code}: {_last_line(log)} (see gpu-tests.log)"))
    return checks


def junit_checks(xml: Path) -> list[Check]:
    """One check per ``testcase`` of a JUnit XML file: passed, failed (failure or error, with
    the first line of its message) or skipped (with its reason)."""
    checks = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = _node_id(case.get("classname", ""), case.get("name", ""))
        status, detail = "pass", ""
        for tag, verdict in (("failure", "fail"), ("error", "fail"), ("skipped", "skip")):
            found = case.find(tag)
            if found is not None:
                status, detail = verdict, _error_line(found, tag)
                break
        checks.append(Check(name, status, detail))
    return checks


def _node_id(classname: str, name: str) -> str:
    """``tests/a/test_b.py::TestC::test_d`` from JUnit's ``tests.a.test_b.TestC`` and ``test_d``."""
    parts = classname.split(".") if classname else []
    module = next((i for i, part in enumerate(parts) if part.startswith("test_")), None)
    if module is None:
        return "::".join(p for p in (classname, name) if p)
    return "::".join(["/".join(parts[:module + 1]) + ".py", *parts[module + 1:], name])


def doctor_check(out: Path, limit_s: float) -> Check:
    """``torchboost doctor`` on the tiny char_gpt.py, on CUDA, its report into OUT/doctor-tiny,
    ended past ``limit_s``."""
    folder = out / "doctor-tiny"
    argv = [sys.executable, "-m", "torchboost", "doctor", "--steps", "5", "--warmup", "3", "--out", str(folder),
            "--", sys.executable, str(SCRIPT), *TINY]
    work = out / "work"  # a folder of its own: the doctor watches its working directory, and the log grows in OUT
    work.mkdir(parents=True, exist_ok=True)
    code = run_limited(argv, limit_s, out / "doctor-tiny.log", cwd=work)
    name = "torchboost doctor on a tiny char_gpt.py"
    if code:
        why = f"ran past its {limit_s:.0f} s limit" if code == 124 else f"exit status {code}"
        return Check(name, "fail", f"{why}: {_last_line(out / 'doctor-tiny.log')} (see doctor-tiny.log)")
    try:
        report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
        device = json.loads((folder / "facts.json").read_text(encoding="utf-8"))["model"]["device"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Check(name, "fail", f"no readable report.json and facts.json in doctor-tiny ({exc})")
    if not report.get("steps_measured") or not str(device).startswith("cuda") or report.get("gpu") is None:
        return Check(name, "fail", f"{report.get('steps_measured')} steps measured on {device}, GPU facts "
                                   f"{'none' if report.get('gpu') is None else 'found'}: expected steps on cuda "
                                   "and GPU kernels in the trace")
    findings = ", ".join(f["id"] for f in report.get("findings", [])) or "none"
    return Check(name, "pass", f"{report['steps_measured']} steps on {device}, median "
                               f"{report['step_time_ms']['median']:.1f} ms, GPU idle {report['gpu']['idle_pct']:.0f}%, "
                               f"findings: {findings}")


def _error_line(found: ET.Element, tag: str) -> str:
    """The first line of a JUnit element's message; for a collection error (whose message says
    only that) the last ``E`` line of its traceback, which names the exception."""
    message = found.get("message") or ""
    if message in ("", "collection failure"):
        raised = [line[1:].strip() for line in (found.text or "").splitlines() if line.startswith("E ")]
        return raised[-1] if raised else message or tag
    return _first_line(message)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return "no output"
    return next((line for line in reversed(lines) if line and not line.startswith("[gpu_smoke")), "no output")


def main(argv: list[str] | None = None) -> int:
    """Run every check, print a line each and the summary; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    limit_s = float(LIMIT_S)
    if len(args) == 3 and args[0] == "--limit" and args[1].isdigit():
        limit_s, args = float(args[1]), args[2:]
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python benchmarks/gpu_smoke.py [--limit SECONDS] OUT", file=sys.stderr)
        return 2
    deadline = time.monotonic() + limit_s - WRITE_S
    out = Path(args[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch

        cuda = torch.cuda.is_available()
        print(f"torch {torch.__version__}, " + (f"CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}"
                                               if cuda else "no CUDA GPU"), flush=True)
    except Exception as exc:  # noqa: BLE001 - the import check below says it again, as a line
        cuda = False
        print(f"torch does not import: {type(exc).__name__}: {exc}", flush=True)
    checks = _show(import_checks(cuda))
    _write(out, checks)
    left_s = max(deadline - time.monotonic(), 1.0)
    # The tests and the doctor at once: the smoke's minute holds both only side by side
    with ThreadPoolExecutor(max_workers=2) as pool:
        tests = pool.submit(gpu_test_checks, out, left_s, cuda)
        doctor = pool.submit(doctor_check, out, left_s) if cuda else None
        checks += _show(tests.result())
        checks += _show([doctor.result() if doctor else Check("torchboost doctor on a tiny char_gpt.py", "skip",
                                                              "needs a CUDA GPU")])
    _write(out, checks)
    return _summary(checks, cuda)


def _write(out: Path, checks: list[Check]) -> None:
    (out / "smoke.json").write_text(json.dumps([dataclasses.asdict(c) for c in checks], indent=2), encoding="utf-8")


def _show(checks: list[Check]) -> list[Check]:
    for check in checks:
        print(check.line(), flush=True)
    return checks


def _summary(checks: list[Check], cuda: bool) -> int:
    """The last line, and the exit status it stands for."""
    count = {status: sum(c.status == status for c in checks) for status in ("pass", "fail", "skip")}
    if not cuda:
        skipped = f"no CUDA GPU: {count['skip']} checks skipped"
        if count["fail"]:
            print(f"smoke: {count['pass']} passed, {count['fail']} failed; {skipped}")
            return 1
        print(skipped)
        return 0
    skipped = f", {count['skip']} skipped" if count["skip"] else ""
    print(f"smoke: {count['pass']} passed, {count['fail']} failed{skipped}")
    return 1 if count["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
