"""What torchboost's reach into a command costs a whole run: the start-up hook and the write guard.

tune's end-to-end check runs both sides under the write guard (every Python process of
the command loads the start-up hook; the guard wraps the file writers and keeps the
user's originals), and ``torchboost run`` of a launcher command (``bash train.sh``) starts
the command from its own process. This prints each against the same command run plainly,
whole processes timed from start to exit, in interleaved rounds, with median ratios:

    python benchmarks/reach_overhead.py [--rounds 5] [--steps 300]

The script trains a small MLP and saves a checkpoint and a CSV line every 10 steps, in a
scratch folder that also holds files of "the user's".
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
from typing import Callable

from torchboost.process.guarded import run_guarded

SCRIPT = """\
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
for step in range(int(sys.argv[1])):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        torch.save(model.state_dict(), "ckpt.pt")
        with open("metrics.csv", "a") as fh:
            fh.write(f"{step},{loss.item():.4f}\\n")
"""


def _folder(steps: int) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="reach-"))
    (folder / "train.py").write_text(SCRIPT)
    (folder / "train.sh").write_text(f"python train.py {steps}\n")
    (folder / "notes.txt").write_text("the user's own notes\n" * 100)
    (folder / "metrics.csv").write_text("0,2.3\n")
    (folder / "torchboost.toml").write_text("[cpu]\nthreads = %d\n" % os.cpu_count())  # what the machine has
    return folder


def _variants(folder: Path, steps: int) -> dict[str, tuple[str, Callable[[], object]]]:
    """name -> (the plain variant it is compared with, how to run it)."""
    python = [sys.executable, "train.py", str(steps)]
    exe = shutil.which("torchboost") or sys.exit("the torchboost console script is not installed")

    def plain(argv: list[str]) -> Callable[[], object]:
        return lambda: subprocess.run(argv, cwd=folder, check=True, stdout=subprocess.DEVNULL)

    def guarded() -> None:
        code, _ = run_guarded(python, env=dict(os.environ), timeout_s=None, out_dir=folder / "out", script=None)
        assert code == 0

    return {
        "python train.py": ("python train.py", plain(python)),
        "python train.py, under the write guard": ("python train.py", guarded),
        "bash train.sh": ("bash train.sh", plain(["bash", "train.sh"])),
        "torchboost run -- bash train.sh": ("bash train.sh", plain([exe, "run", "--", "bash", "train.sh"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    folder = _folder(args.steps)
    os.chdir(folder)  # the guard's roots: the working directory, as for a user's tune
    variants = _variants(folder, args.steps)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        order = list(variants) if round_ % 2 == 0 else list(reversed(variants))  # interleaved, alternating
        for name in order:
            start = time.perf_counter()
            variants[name][1]()
            seconds[name].append(time.perf_counter() - start)
    print(f"{args.rounds} interleaved rounds, {args.steps} steps a run; ratio: median of the rounds' ratios")
    print(f"| {'command':<40} | median s | ratio to plain |")
    print(f"| {'-' * 40} | -------: | -------------: |")
    for name, (base, _) in variants.items():
        ratios = [a / b for a, b in zip(seconds[name], seconds[base])]
        print(f"| {name:<40} | {statistics.median(seconds[name]):8.2f} | {statistics.median(ratios):14.3f} |")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
