"""Checkpoint writes and printing: the doctor's phase rows against the script's own timers.

    python benchmarks/host_side.py [--rounds 5] [--steps 20] [--plain]

The script (``tests/scripts/print_and_save.py``: an MLP on one thread that prints a line
every step, and with ``--norms`` every parameter's norm as a tensor, and saves a 1.9 MB
checkpoint every 5 steps into ``ckpt/`` under its working folder) runs two ways, each in
a fresh temporary folder, the rounds interleaved so that a neighbour's load falls on both:

* by hand: ``python -u SCRIPT --hand-times FILE``, alone, timing each ``torch.save`` and each
  print itself; its rows are those times per step and the mean step (from the end of one
  optimizer step to the next) over the same kind of steps the doctor's table rests on (the
  typical ones after its first ``WARMUP_STEPS``), and the median save per write;
* the doctor: ``torchboost doctor --steps N --warmup 2 --json -- python SCRIPT``; its rows
  are ``report.json``'s ``phase_ms`` (checkpoint, output, their sum with the rest: the
  step as its table adds up) and the median of ``facts.host.checkpoint_ms`` per write.

Its stdout goes to a pipe either way, unbuffered (``python -u``, as the doctor starts its
child to relay its output live; each line written at once, as on a terminal). It prints a row per round, then per row the median
over the rounds of each way, the doctor's over the hand's, the median of the rounds' own
ratios, and whether the medians agree within 25% or 1 ms; then the CPU and its bf16 flags.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "print_and_save.py"
WARMUP_STEPS = 10
ROWS = ("checkpoint ms/step", "torch.save ms/write", "printing ms/step", "step ms (mean)")


def _env() -> dict[str, str]:
    """This tree's torchboost first on the path, for the doctor and its child."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}


def _cpu() -> str:
    """``lscpu``'s model name and whether it has avx512_bf16 and AMX."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU"
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = fields.get("Flags", "").split()
    marks = [f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return f"{fields.get('Model name', '?').strip()}; {', '.join(marks) or 'no avx512_bf16, no AMX'}"


def _typical(spans: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """The spans (step ms, save ms, print ms) the phase table's rows are the means of: those
    whose time less their save and print is within 1.5x of the median either way (the doctor's
    typical steps, docs/doctor.md), so a neighbour's slowed steps leave both measures alike."""
    judged = [total - save - printed for total, save, printed in spans]
    median = statistics.median(judged)
    return [span for span, j in zip(spans, judged) if median / 1.5 <= j <= median * 1.5]


def by_hand(steps: int, norms: list[str]) -> dict[str, float]:
    """One run of the script alone; its own timers as the rows."""
    with tempfile.TemporaryDirectory() as tmp:
        times_file = Path(tmp) / "hand.json"
        subprocess.run([sys.executable, "-u", str(SCRIPT), "--steps", str(WARMUP_STEPS + steps), "--hand-times",
                        str(times_file), *norms], check=True, capture_output=True, text=True, timeout=600, cwd=tmp,
                       env=_env())
        times = json.loads(times_file.read_text())
    ends, saves, prints = times["step_end_s"], times["save_ms"], times["print_ms"]
    # The span from one optimizer step's end to the next holds the print and save after the first.
    spans = _typical([(1000.0 * (ends[i] - ends[i - 1]), saves[i - 1], prints[i - 1])
                      for i in range(WARMUP_STEPS, len(ends))])
    return {"checkpoint ms/step": statistics.mean(s for _, s, _ in spans),
            "torch.save ms/write": statistics.median(s for s in saves[WARMUP_STEPS - 1:] if s > 0),
            "printing ms/step": statistics.mean(p for _, _, p in spans),
            "step ms (mean)": statistics.mean(t for t, _, _ in spans)}


def by_doctor(steps: int, norms: list[str]) -> dict[str, float]:
    """One doctor run of the script; its phase table's rows."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", str(steps), "--warmup",
                              "2", "--out", str(Path(tmp) / "report"), "--json", "--", sys.executable, str(SCRIPT),
                              "--steps", "1000", *norms],
                             check=True, capture_output=True, text=True, timeout=600, cwd=tmp, env=_env())
    report = json.loads(out.stdout)
    rows, host = report["phase_ms"], report["facts"]["host"]
    return {"checkpoint ms/step": rows["checkpoint"], "torch.save ms/write": statistics.median(host["checkpoint_ms"]),
            "printing ms/step": rows["output"], "step ms (mean)": sum(rows.values())}


def agree(hand: float, doctor: float) -> bool:
    """Within 25% of the hand measure, or 1 ms of it."""
    return abs(doctor - hand) <= max(0.25 * hand, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="steps the doctor records, and the hand run times")
    parser.add_argument("--plain", action="store_true", help="one print a step, no parameter norms")
    args = parser.parse_args()
    norms = [] if args.plain else ["--norms"]
    hands: list[dict[str, float]] = []
    doctors: list[dict[str, float]] = []
    print("round  " + "  ".join(f"{row:>22}" for row in ROWS) + "   (hand / doctor)")
    for i in range(1, args.rounds + 1):
        order = (by_hand, by_doctor) if i % 2 else (by_doctor, by_hand)  # each first every other round
        ran = {way: way(args.steps, norms) for way in order}
        hands.append(ran[by_hand])
        doctors.append(ran[by_doctor])
        print(f"{i:>5}  " + "  ".join(f"{ran[by_hand][r]:>10.3f} / {ran[by_doctor][r]:<9.3f}" for r in ROWS))
    print(f"\n| row | by hand (median of {args.rounds}) | doctor | doctor / hand | per round (median) "
          "| within 25% or 1 ms |")
    print("|---|---:|---:|---:|---:|---|")
    for row in ROWS:
        hand = statistics.median(h[row] for h in hands)
        doctor = statistics.median(d[row] for d in doctors)
        paired = statistics.median(d[row] / h[row] for h, d in zip(hands, doctors))
        print(f"| {row} | {hand:.3f} | {doctor:.3f} | {doctor / hand:.2f} | {paired:.2f} "
              f"| {'yes' if agree(hand, doctor) else 'NO'} |")
    print(f"\nCPU: {_cpu()}; script: {SCRIPT.name} {' '.join(norms)}")


if __name__ == "__main__":
    main()
