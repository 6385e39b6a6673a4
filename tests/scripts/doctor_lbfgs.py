"""A closure optimizer: LBFGS re-evaluates forward and backward inside optimizer.step."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 1))
x, y = torch.randn(512, 32), torch.randn(512, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)


def closure():
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for _ in range(40):
    optimizer.step(closure)
