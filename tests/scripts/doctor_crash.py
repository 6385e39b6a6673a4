"""A loop that fails at step 3: with sys.exit(3) given "exit", else with an exception."""

import sys

import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)
for step in range(50):
    if step == 3:
        if sys.argv[1:] == ["exit"]:
            sys.exit(3)
        raise RuntimeError("boom at step 3")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
