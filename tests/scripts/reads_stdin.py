"""Asks a question on stdin before training (a "continue? [y/N]"), then trains a few steps."""

import torch

answer = input("overwrite the old checkpoint? [y/N] ")
print(f"read: {answer}")
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)
for step in range(20):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
