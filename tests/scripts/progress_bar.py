"""A plain loop that draws its own progress bar on stderr, as tqdm does: each update
starts with "\\r", and the line is never ended (the bar of a run stopped before its end)."""

import argparse
import sys

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for step in range(args.steps):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    sys.stderr.write(f"\rtraining {step + 1}/{args.steps} loss {loss.item():.3f}")
    sys.stderr.flush()
sys.stderr.write(f"\rtraining done, {args.steps} steps")  # still no newline
sys.stderr.flush()
