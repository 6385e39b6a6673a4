"""A script whose loss is NaN from its first step: a parameter initialised to NaN."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()
torch.manual_seed(0)
model = nn.Linear(8, 1)
with torch.no_grad():
    model.bias.fill_(float("nan"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for _ in range(args.steps):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
