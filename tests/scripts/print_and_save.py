"""An MLP that prints a line every step and saves a checkpoint every 5 steps.

``python print_and_save.py [--steps N] [--save-every K] [--norms] [--hand-times FILE]``: the
checkpoint goes to ``ckpt/model.pt`` under the working folder; ``--norms`` also prints every
parameter's norm each step; ``--hand-times FILE`` times each ``torch.save`` and each print in
the script itself and writes them to FILE as JSON, per step (``benchmarks/host_side.py``
holds the doctor's rows against them).
"""

import argparse
import json
import os
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--save-every", type=int, default=5)
parser.add_argument("--norms", action="store_true")
parser.add_argument("--hand-times")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)  # one thread: a shared machine's other cores do not decide the step
layers = [nn.Linear(64, 256), nn.ReLU()]
for _ in range(7):
    layers += [nn.Linear(256, 256), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(256, 10))  # about 1.9 MB of parameters to save
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
os.makedirs("ckpt", exist_ok=True)
times = {"save_ms": [], "print_ms": [], "step_end_s": []}  # per step: the saves' and prints' time, the step's end


def timed(call, *call_args):
    """``call(*call_args)``'s time in milliseconds."""
    start = time.perf_counter()
    call(*call_args)
    return (time.perf_counter() - start) * 1000.0


for step in range(args.steps):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    times["step_end_s"].append(time.perf_counter())
    printing = timed(print, f"step {step} loss {loss.item():.4f}")
    if args.norms:
        for name, param in model.named_parameters():
            norm = param.detach().norm()
            printing += timed(print, name, norm)  # formatting the tensor is print's
    times["print_ms"].append(printing)
    times["save_ms"].append(timed(torch.save, model.state_dict(), "ckpt/model.pt")
                            if step % args.save_every == 0 else 0.0)

if args.hand_times:
    with open(args.hand_times, "w") as fh:
        json.dump(times, fh)
