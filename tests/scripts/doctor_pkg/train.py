"""A tiny loop run as a module; checks it sees its own arguments."""

import sys

import torch

assert sys.argv[1:] == ["--lr", "0.05"], sys.argv
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=float(sys.argv[2]))
x = torch.randn(16, 8)
for step in range(100):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
