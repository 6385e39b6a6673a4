"""What ``torchboost run`` costs over ``python train.py`` when it has nothing to apply, and where.

    python benchmarks/run_startup.py [--pairs 7] [--seconds 3]

A script that trains a small MLP for ``--seconds`` of steps (about a 3 s run with Python's
and torch's start-up) sits in a scratch folder with a ``torchboost.toml`` that sets nothing.
Whole processes are timed from start to exit, ``python train.py`` and ``torchboost run --
python train.py`` in interleaved pairs, the order alternating; the ratio is the median of the
pairs' ratios. Then where the difference goes: ``import torch`` against ``import torch`` plus
what ``torchboost run`` imports, in interleaved pairs of fresh interpreters, and the modules
that take the most of it (``python -X importtime``).

Python's bytecode cache is used as the interpreter is configured (``PYTHONDONTWRITEBYTECODE``
unset: torchboost's modules load from their ``.pyc``; set, every start compiles them from
source, which the first line of the output says).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """\
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
start = time.perf_counter()
while time.perf_counter() - start < float(sys.argv[1]):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""

RUN_IMPORTS = "import torchboost.cli, torchboost.cli.run"


def _timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _pairs(a: list[str], b: list[str], cwd: Path, pairs: int) -> tuple[list[float], list[float]]:
    """Interleaved pairs, the order alternating; one untimed run of each first (caches)."""
    _timed(a, cwd), _timed(b, cwd)
    sa, sb = [], []
    for i in range(pairs):
        for argv, out in ((a, sa), (b, sb)) if i % 2 == 0 else ((b, sb), (a, sa)):
            out.append(_timed(argv, cwd))
    return sa, sb


def _row(name: str, base: list[float], other: list[float]) -> str:
    ratios = [o / b for o, b in zip(other, base)]
    return (f"| {name} | {statistics.median(base):.2f} | {statistics.median(other):.2f} | "
            f"{statistics.median(other) - statistics.median(base):+.2f} | {statistics.median(ratios):.3f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}) |")


def _import_top(cwd: Path, n: int = 8) -> list[str]:
    """The torchboost modules whose own import time (``-X importtime``'s self column) is largest."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import torch; {RUN_IMPORTS}"], cwd=cwd,
                          capture_output=True, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit() and "torchboost" in parts[2]:
            rows.append((int(parts[0]), int(parts[1]), parts[2].strip()))
    total = sum(own for own, _, _ in rows)
    top = sorted(rows, reverse=True)[:n]
    return [f"torchboost's modules, own import time summed: {total / 1000:.0f} ms; largest:"] + [
        f"  {own / 1000:6.1f} ms  {name}" for own, _, name in top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=2.0, help="the training loop's own length")
    args = parser.parse_args()
    exe = shutil.which("torchboost") or sys.exit("the torchboost console script is not installed")
    folder = Path(tempfile.mkdtemp(prefix="run-startup-"))
    (folder / "train.py").write_text(SCRIPT)
    (folder / "torchboost.toml").write_text("# nothing to apply\n")
    bytecode = "off (PYTHONDONTWRITEBYTECODE set)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    print(f"python {sys.version.split()[0]}, bytecode cache {bytecode}, load {os.getloadavg()[0]:.1f}")
    print(f"{args.pairs} interleaved pairs of whole processes; ratio: median of the pairs' ratios (range)")
    print("| command | plain median s | with torchboost median s | difference | ratio |")
    print("|---|---:|---:|---:|---:|")
    plain, run = _pairs([sys.executable, "train.py", str(args.seconds)],
                        [exe, "run", "--", sys.executable, "train.py", str(args.seconds)], folder, args.pairs)
    print(_row("python train.py / torchboost run -- python train.py", plain, run))
    bare, more = _pairs([sys.executable, "-c", "import torch"],
                        [sys.executable, "-c", f"import torch; {RUN_IMPORTS}"], folder, args.pairs)
    print(_row("import torch / import torch and what run imports", bare, more))
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    print("\n".join(_import_top(folder)))
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
