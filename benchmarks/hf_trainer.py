"""A Hugging Face Trainer script: doctor, tune, and the exported TrainingArguments re-measured.

    python benchmarks/hf_trainer.py [--budget 120] [--pairs 3] [--max-steps 200] [--sample-ms 2]
        [--out hf_trainer.json]

The script is ``tests/scripts/hf_trainer_train.py`` (a tiny random-init GPT-2, synthetic
tokens, ``--sample-ms`` of loading per sample, the Trainer's non-fused ``adamw_torch``).
``torchboost doctor`` and ``torchboost tune --budget`` run on it in a scratch folder; tune's
claim is its report's headline (end to end). Then the claim is re-measured independently,
as a Trainer user would apply it: ``python SCRIPT`` against ``python SCRIPT
--training-args JSON --threads N``, where JSON is ``torchboost export --to transformers``'s
keywords and N the ``torch.set_num_threads`` line it asks for by hand; whole processes
timed with ``time.perf_counter`` (output to files), interleaved pairs, median pair ratio.
Prints a table and writes the figures as JSON.
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
from torchboost.frameworks import spell

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "scripts" / "hf_trainer_train.py"


def _torchboost(folder: Path, *argv: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", *argv], cwd=folder, capture_output=True,
                          text=True)
    if proc.returncode not in (0, NO_PROVEN_WIN, UNVERIFIED):  # tune's results: nothing proven, or unverified
        raise SystemExit(f"torchboost {argv[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start, proc


def _doctor(folder: Path, command: list[str]) -> dict:
    seconds, _ = _torchboost(folder, "doctor", "--out", "doctor", "--", *command)
    report = json.loads((folder / "doctor" / "report.json").read_text())
    facts = report["facts"]
    return {"seconds": round(seconds, 1), "median_step_ms": round(report["step_time_ms"]["median"], 1),
            "breakdown_pct": {k: round(v, 1) for k, v in report["breakdown_pct"].items()},
            "planned": [facts["planned_steps"], facts["planned_from"]], "frameworks": facts["frameworks"],
            "findings": {f["id"]: [round(f["expected_speedup"], 2), f["fix"].get("transformers")]
                         for f in report["findings"]}}


def _tune(folder: Path, command: list[str], budget: float) -> dict:
    seconds, proc = _torchboost(folder, "tune", "--budget", str(budget), "--", *command)
    report = json.loads((folder / "torchboost-tune" / "report.json").read_text())
    e2e = report.get("end_to_end") or {}
    return {"seconds": round(seconds, 1), "settings": report["settings"], "search_speedup": report["search_speedup"],
            "claim": report["speedup"], "end_to_end": e2e, "verdict": report["verdict"],
            "run_steps": [report["run_steps"], report["run_steps_source"]], "next_step": report["next_step"],
            "use_it": [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if "use it:" in line]}


def by_hand(config: BoostConfig) -> list[str]:
    """The script's arguments that apply ``config`` as a Trainer user would: the exported
    TrainingArguments keywords, and the thread count it has no field for."""
    keywords = dict(spell(config).words.transformers)
    threads = config.cpu.threads if isinstance(config.cpu.threads, int) else None
    return ["--training-args", json.dumps(keywords)] + (["--threads", str(threads)] if threads else [])


def _timed(command: list[str], folder: Path) -> float:
    with open(folder / "out.log", "w") as out, open(folder / "err.log", "w") as err:
        start = time.perf_counter()
        code = subprocess.run(command, stdout=out, stderr=err, cwd=folder).returncode
        seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{command} failed ({code}): {(folder / 'err.log').read_text()[-2000:]}")
    return seconds


def remeasure(plain: list[str], tuned: list[str], pairs: int, folder: Path) -> dict:
    """``plain`` against ``tuned``, whole processes, interleaved: the median pair ratio."""
    runs = [(_timed(plain, folder), _timed(tuned, folder)) for _ in range(pairs)]
    ratios = [a / b for a, b in runs]
    return {"plain_s": [round(a, 2) for a, _ in runs], "tuned_s": [round(b, 2) for _, b in runs],
            "ratio": round(statistics.median(ratios), 3), "ratios": [round(r, 3) for r in ratios]}


def main() -> None:
    """Run doctor, tune and the re-measure; print the figures and write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--sample-ms", type=float, default=2.0)
    parser.add_argument("--out", default="hf_trainer.json")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tb-hf-"))
    script = ["python", str(SCRIPT), "--max-steps", str(args.max_steps), "--optim", "adamw_torch",
              "--sample-ms", str(args.sample_ms), "--output-dir", str(folder / "trainer-out")]
    result = {"command": script, "doctor": _doctor(folder, script), "tune": _tune(folder, script, args.budget)}
    config = BoostConfig.from_toml(folder / "torchboost.toml")
    extra = by_hand(config)
    plain = [sys.executable, *script[1:]]
    result["by_hand"] = extra
    result["remeasure"] = remeasure(plain, plain + extra, args.pairs, folder)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
