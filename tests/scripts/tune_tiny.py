"""A tiny plain-PyTorch training script for tuning tests: an MLP on in-memory tensors."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(512, 32)
y = (x[:, :4].sum(dim=1) > 0).long()
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
loss_fn = nn.CrossEntropyLoss()
for step in range(args.steps):
    i = (step * 32) % 512
    loss = loss_fn(model(x[i : i + 32]), y[i : i + 32])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
