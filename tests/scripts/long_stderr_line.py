"""Writes one long line to stderr (a dumped config, a long warning), then trains a few steps.

The line's length in KB is the first argument (default 150); it has no newline until its end.
"""

import sys

import torch

size_kb = int(sys.argv[1]) if sys.argv[1:] else 150
sys.stderr.write("config=" + "x" * (size_kb * 1000) + "\n")
sys.stderr.flush()
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)
for step in range(30):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
