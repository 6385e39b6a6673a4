"""Trains, then kills itself with SIGKILL at step 12, as the OOM killer would."""

import os
import signal

import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100):
    if step == 12:
        os.kill(os.getpid(), signal.SIGKILL)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
