"""A Booster loop that reads ./torchboost.toml; prints how many optimizer steps really ran."""

import json
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchboost

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
booster = torchboost.Booster(verbose=False)
model, optimizer, loader = booster.prepare(model, optimizer, loader)
for epoch in range(2):
    for x, y in loader:
        with booster.accumulate(model):
            with booster.autocast():
                loss = nn.functional.mse_loss(model(x), y)
            booster.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
print(json.dumps({"optimizer_steps": optimizer.real_steps,
                  "accumulation_steps": booster.resolved.config.accumulation.steps}), file=sys.stdout)
