"""A loop under bf16 autocast on the CPU."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
for step in range(100):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
