"""Trains, then ends with os._exit(CODE) at step N (no exception, no atexit, no finally).

Arguments: N (default 10) and CODE (default 3).
"""

import os
import sys

import torch

at_step = int(sys.argv[1]) if sys.argv[1:] else 10
code = int(sys.argv[2]) if sys.argv[2:] else 3
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)
for step in range(100):
    if step == at_step:
        os._exit(code)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
